#!/usr/bin/env python3
"""Convert MovieLens ratings (userId,movieId,rating,timestamp) into sluice jsonl.

Every rating becomes one sample. A user's ratings are sorted by time and cut
into sessions wherever two consecutive ratings are more than --gap-minutes
apart (30 by default). Each sample carries:

  sample_id     its line number in the output (from 0)
  session_id    a number unique over the whole output
  ts            the rating's Unix timestamp
  labels        liked (1.0 when rating >= 4, else 0.0) and rating (the raw value)
  sparse        movie [movieId], user_id [userId], and user_history: the movies
                the user rated before the session started (the last --history,
                100 by default, oldest first) - so it repeats within a session,
                which is what storage dedup on user_history exploits.

Output order is by user, then time (ties by movieId), so the output is a pure
function of the input. Python 3 standard library only.

  python3 examples/movielens_sessions.py \\
      --ratings ../shared/data/movielens-latest-small/ratings.csv --output ml.jsonl
  sluice table import --format jsonl --input ml.jsonl --table ml --partition ds=2016-10-16 \\
      --cluster --dedup-group history=user_history
"""
import argparse
import csv
import json
import sys
from collections import defaultdict


def read_ratings(path):
    by_user = defaultdict(list)
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:4]] != [
            "userId", "movieId", "rating", "timestamp"
        ]:
            raise SystemExit(f"{path}: expected the header userId,movieId,rating,timestamp")
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                user, movie, rating, ts = int(row[0]), int(row[1]), float(row[2]), int(row[3])
            except (ValueError, IndexError):
                raise SystemExit(f"{path}:{lineno}: bad row {row!r}")
            by_user[user].append((ts, movie, rating))
    return by_user


def samples(by_user, gap_seconds, history_cap):
    sample_id = 0
    session_id = 0
    for user in sorted(by_user):
        ratings = sorted(by_user[user])
        rated = []  # movies rated in earlier sessions, oldest first
        session_rated = []
        history = []
        prev_ts = None
        for ts, movie, rating in ratings:
            if prev_ts is None or ts - prev_ts > gap_seconds:
                # A new session: its history is everything rated before it.
                rated.extend(session_rated)
                session_rated = []
                history = rated[-history_cap:] if history_cap > 0 else []
                session_id += 1
            yield {
                "sample_id": sample_id,
                "session_id": session_id,
                "ts": ts,
                "labels": {"liked": 1.0 if rating >= 4.0 else 0.0, "rating": rating},
                "sparse": {"movie": [movie], "user_id": [user], "user_history": history},
            }
            session_rated.append(movie)
            sample_id += 1
            prev_ts = ts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ratings", required=True, help="MovieLens ratings.csv")
    ap.add_argument("--output", default="-", help="jsonl output file (default: stdout)")
    ap.add_argument("--gap-minutes", type=float, default=30.0,
                    help="a longer pause between two ratings starts a new session")
    ap.add_argument("--history", type=int, default=100,
                    help="keep the last N movies of the user history")
    args = ap.parse_args()

    by_user = read_ratings(args.ratings)
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    n = 0
    sessions = set()
    try:
        for s in samples(by_user, args.gap_minutes * 60.0, args.history):
            out.write(json.dumps(s, separators=(",", ":")))
            out.write("\n")
            n += 1
            sessions.add(s["session_id"])
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"movielens_sessions: {n} samples, {len(sessions)} sessions, {len(by_user)} users",
          file=sys.stderr)


if __name__ == "__main__":
    main()
