"""What more than one stage shares: times, a span marked failed, a regular file read within its bound, an HTTP
body decoded within its bound."""
