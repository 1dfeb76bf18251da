"""Simulations that run the node's own code at sizes one machine cannot host."""
