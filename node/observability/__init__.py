"""What a person sees of a run: progress lines, the summary and plots (report.py), the Prometheus endpoint
(exporter.py)."""
