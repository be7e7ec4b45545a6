"""Talking to the Instance Metadata Service: the HTTP client, the document model, this VM's identity,
request pacing."""
