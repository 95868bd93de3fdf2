"""Google's Python subscriber (PyPI google-cloud-pubsub), one side of the throughput benchmark.

Run by `cargo bench --bench throughput` from its own virtualenv (target/bench-peers/venv):

    subscriber.py --subscription projects/P/subscriptions/S --messages N --streams K [--exactly-once]
    subscriber.py --version

Opens K streaming pulls (one `subscribe()` call each, flow control 1,000 messages each), acks
every message, and stops at the N-th ack (on an exactly-once subscription: the N-th ack the
server confirmed). Prints one line,

    RESULT per_second=.. cpu_us_per_message=.. peak_rss_kb=..

measured from just before the first `subscribe()` (imports and the client are built before) to
that ack, then exits. PUBSUB_EMULATOR_HOST points the client at the emulator.
"""

import argparse
import os
import sys
import threading
import time


def peak_rss_kb():
    """This process image's peak resident set (VmHWM), in KiB.

    Not getrusage's ru_maxrss: Linux carries it over from the parent through fork and exec, so a
    child of a large benchmark process would report the parent's peak instead of its own.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def versions():
    from importlib.metadata import version

    return "google-cloud-pubsub {}, grpcio {}, protobuf {}, Python {}".format(
        version("google-cloud-pubsub"),
        version("grpcio"),
        version("protobuf"),
        sys.version.split()[0],
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--subscription")
    parser.add_argument("--messages", type=int)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--exactly-once", action="store_true")
    args = parser.parse_args()
    if args.version:
        print(versions(), flush=True)
        return
    if not args.subscription or not args.messages:
        parser.error("--subscription and --messages are required")

    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    flow_control = pubsub_v1.types.FlowControl(max_messages=1000)

    lock = threading.Lock()
    done = threading.Event()
    count = 0
    result = {}

    def counted():
        nonlocal count
        with lock:
            count += 1
            if count == args.messages:
                result["cpu"] = time.process_time()
                result["wall"] = time.monotonic()
                done.set()

    def on_confirmed(future):
        # A refused ack raises here; the message comes back and is counted then.
        if future.exception() is None:
            counted()

    if args.exactly_once:

        def callback(message):
            message.ack_with_response().add_done_callback(on_confirmed)

    else:

        def callback(message):
            message.ack()
            counted()

    cpu = time.process_time()
    wall = time.monotonic()
    pulls = [
        subscriber.subscribe(args.subscription, callback, flow_control=flow_control)
        for _ in range(args.streams)
    ]

    def ended(pull):
        # A streaming pull that ends before the last ack ended in an error: report it and leave.
        if not done.is_set():
            print(
                "streaming pull ended: {!r}".format(pull.exception()),
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)

    for pull in pulls:
        pull.add_done_callback(ended)
    done.wait()

    elapsed = result["wall"] - wall
    print(
        "RESULT per_second={:.1f} cpu_us_per_message={:.3f} peak_rss_kb={}".format(
            args.messages / elapsed,
            (result["cpu"] - cpu) * 1e6 / args.messages,
            peak_rss_kb(),
        ),
        flush=True,
    )

    # Stop the streaming pulls; if the client does not let go in time, leave anyway.
    threading.Timer(5.0, lambda: os._exit(0)).start()
    for pull in pulls:
        pull.cancel()
    for pull in pulls:
        try:
            pull.result(timeout=5.0)
        except Exception:
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
