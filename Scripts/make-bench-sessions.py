#!/usr/bin/env python3
"""Create sessions in a running keyholed and write their tokens, one per line, for
`keyhole-bench load --sessions FILE`.

    Scripts/make-bench-sessions.py --socket /tmp/kh.sock --count 100000 --out /tmp/sessions.txt

Sessions are created from several threads through one pipelined client (run keyholed with
[storage] fsync = "off" for a fast set-up: the sessions persist all the same). With --only-count,
nothing is written: handy to fill a store for start-up and memory measurements.
"""
import argparse
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Protocol", "clients", "python"))
import keyhole  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--users", type=int, default=0, help="distinct subjects (default: one per session)")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--issuer", help="the sessions' issuer (needed when keyholed has several)")
    parser.add_argument("--out")
    args = parser.parse_args()
    users = args.users or args.count
    tokens = [None] * args.count
    client = keyhole.Client(args.socket)

    def work(start):
        for n in range(start, args.count, args.threads):
            sub = "001234.%032x.%04d" % (n % users, n % 10000)
            tokens[n] = client.create_session(sub, issuer=args.issuer)["session"]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(tokens) + "\n")
    print("created %d sessions for %d users" % (args.count, users))


if __name__ == "__main__":
    main()
