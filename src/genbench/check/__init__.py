"""Preflight: is the server alive and serving the model, what kind of server it is
(engine or router), and its own counters."""
