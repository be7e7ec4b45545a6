"""The reference: the plain polling loop of Microsoft's Scheduled Events documentation.

The shape of the documented Python sample (``get_scheduled_events`` in a ``while True`` loop that
sleeps a second and acts when ``DocumentIncarnation`` changes), with ``urllib`` from the standard
library instead of ``requests``. It is the floor any exporter is compared with: one GET with
``Metadata: true`` per second, print the document when it changed, nothing else.

    python benchmarks/reference_loop.py http://127.0.0.1:8080 [--interval 1]
"""

import argparse
import contextlib
import json
import time
import urllib.request

API_VERSION = "2020-07-01"


def get_scheduled_events(opener: urllib.request.OpenerDirector, url: str) -> dict[str, object]:
    request = urllib.request.Request(url, headers={"Metadata": "true"})
    with opener.open(request, timeout=5) as response:
        document: dict[str, object] = json.loads(response.read())
        return document


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("base_url", nargs="?", default="http://169.254.169.254")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    url = f"{args.base_url.rstrip('/')}/metadata/scheduledevents?api-version={API_VERSION}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # IMDS must not be proxied
    last_incarnation: object = -1
    while True:
        try:
            document = get_scheduled_events(opener, url)
        except (OSError, ValueError) as error:
            print(f"error: {error}", flush=True)
        else:
            if document["DocumentIncarnation"] != last_incarnation:
                last_incarnation = document["DocumentIncarnation"]
                print(json.dumps(document), flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
