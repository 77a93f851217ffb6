"""V1 (issue 37): traffic that does not repeat.

A generated part of the document root, `v1/`, deterministic (seeded) and made at each run:

- `v1/one/4k.txt`: the single 4 KiB file of the repeated rows;
- `v1/d50/NNNN.txt`: 50 distinct 4 KiB files;
- `v1/d2000/NNNN.txt`: 2,000 distinct 4 KiB files;
- `v1/mixed/NNNN.txt`: 2,000 files of sizes drawn log-uniform from 100 B to 64 KiB (a median
  near 2.3 KB, a mean near 10 KB; 20 MB in all, as static sites' assets spread).

and, per set, a list of its paths for `h2load -i`: the set shuffled with a fixed seed, again
and again (each round shuffled anew) until the list is long enough, arranged so that no path
follows itself, across rounds nor where h2load wraps from the last to the first.

h2load gives every connection of a process the same list from its start, so connections that
share a list walk it in near lockstep and the server sees each path several times in a row,
from different connections: memo hits by accident. The load therefore runs one h2load process
per client, each with its own order (`uri_list(name, client)`, seeded by the client's number).
"""

import math
import os
import random

SEED = 37  # the number: every run makes the same bytes and the same order

MIXED_MIN = 100
MIXED_MAX = 64 * 1024
FOUR_K = 4096

# name: (number of files, "4k" or "mixed")
SETS = {
    "one": (1, "4k"),
    "d50": (50, "4k"),
    "d2000": (2000, "4k"),
    "mixed": (2000, "mixed"),
}

# A list holds at least this many paths, and at least ROUNDS_MIN rounds of its set.
LIST_MIN = 10000
ROUNDS_MIN = 5
# A client's own list: at least this many paths and one whole round. A client makes about a
# hundredth of a run's requests (100 clients), so this rarely wraps; when it does, the client
# starts its own order again, still out of step with every other client.
CLIENT_LIST_MIN = 2000


def sizes(name):
    """The sizes of set `name`'s files, in file order (deterministic)."""
    count, kind = SETS[name]
    if kind == "4k":
        return [FOUR_K] * count
    rng = random.Random("%d-sizes-%s" % (SEED, name))
    lo, hi = math.log(MIXED_MIN), math.log(MIXED_MAX)
    return [int(round(math.exp(rng.uniform(lo, hi)))) for _ in range(count)]


def file_path(name, index):
    """The request path of file `index` of set `name`."""
    if name == "one":
        return "/v1/one/4k.txt"
    return "/v1/%s/%04d.txt" % (name, index)


def paths(name):
    return [file_path(name, i) for i in range(SETS[name][0])]


def content(name, index, size):
    """Deterministic bytes, distinct from file to file (a random-looking body: nobody's
    compression or deduplication helps)."""
    return random.Random("%d-body-%s-%d" % (SEED, name, index)).randbytes(size)


def uri_list(name, client=None):
    """The shuffled list of set `name`'s paths for `h2load -i` (see the module's doc).
    `client`: client number N's own order (its own seed, at least CLIENT_LIST_MIN paths)."""
    base = paths(name)
    if len(base) < 2:
        return base
    if client is None:
        rounds = max(ROUNDS_MIN, math.ceil(LIST_MIN / len(base)))
        rng = random.Random("%d-order-%s" % (SEED, name))
    else:
        rounds = max(1, math.ceil(CLIENT_LIST_MIN / len(base)))
        rng = random.Random("%d-order-%s-client-%d" % (SEED, name, client))
    out = []
    for _ in range(rounds):
        order = base[:]
        rng.shuffle(order)
        if out and order[0] == out[-1]:
            # A round starts where the last ended: swap its first two (distinct) paths.
            order[0], order[1] = order[1], order[0]
        out.extend(order)
    if out[-1] == out[0]:
        # h2load goes round from the last to the first: swap the last round's last two.
        # The new last differs from the first since the first path appears once per round.
        out[-1], out[-2] = out[-2], out[-1]
    return out


def make(docroot, list_dir):
    """Write the V1 files under `docroot`/v1 and the path lists as `list_dir`/NAME.txt;
    returns {name: list file}. World-readable, for servers that drop privileges."""
    os.makedirs(list_dir, exist_ok=True)
    lists = {}
    for name in SETS:
        d = os.path.join(docroot, "v1", name)
        os.makedirs(d, exist_ok=True)
        for i, size in enumerate(sizes(name)):
            path = os.path.join(docroot, file_path(name, i).lstrip("/"))
            with open(path, "wb") as f:
                f.write(content(name, i, size))
            os.chmod(path, 0o644)
        os.chmod(d, 0o755)
        lists[name] = os.path.join(list_dir, name + ".txt")
        with open(lists[name], "w") as f:
            f.write("\n".join(uri_list(name)) + "\n")
    os.chmod(os.path.join(docroot, "v1"), 0o755)
    return lists


def expected_body_bytes(name):
    """Body bytes of one request to each file of set `name` (the probe checks them)."""
    return sum(sizes(name))
