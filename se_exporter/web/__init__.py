"""The HTTP side: /metrics and the other endpoints, the server, basic auth and TLS from --web.config.file."""
