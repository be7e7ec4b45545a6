"""Talking to the Instance Metadata Service: the HTTP client with its pacing, the document model, this VM's
identity, the impact of an event."""

# IMDS throttles above 5 requests/s per VM. Spacing requests 250 ms apart keeps any one-second window (closed
# at both ends) at 5 requests or fewer, whatever mix of GET and POST the exporter sends, also while it backs off
# from faults. Here, not in the client, so that the flags' checks need no HTTP library.
IMDS_MIN_REQUEST_SPACING = 0.25
