#!/usr/bin/env python3
"""Fails when an include runs from a lower layer of plait to a higher one.

    scripts/check-layers.py [REPO]

The layers, what each may include and the picture are in docs/architecture.md. This reads
every #include "..." of src/, include/plait/, tools/ and python/src/ and checks three rules:

  1. A file includes only its own layer or layers below it (public headers belong to the
     layer that implements them). The services (compress, ps, shuffle, moe) share a rank and do
     not include each other.
  2. Only a provider's own files include it (src/transport/shm|tcp|ucx/), and
     src/transport/providers.cc, the one place that knows every provider.
  3. A public header includes only public headers.

An include that breaks a rule on purpose is listed, with its reason, in the table under
"## Includes that go up" in docs/architecture.md; the check reads that table, and also
fails on a row that no longer matches an include (the list stays true).
"""
import os
import re
import sys

# (layer, rank): the source folders and the public headers of each, bottom up.
LAYERS = [
    ("core", 0, ["src/core/"],
     ["error.h", "types.h", "checkpoint.h", "work.h"]),
    ("bootstrap", 1, ["src/bootstrap/"], ["store.h", "bootstrap.h"]),
    ("transport", 2, ["src/transport/"], ["rdma.h"]),
    ("rdma_api", 3, ["src/rdma_api/"], []),
    ("coll", 4, ["src/coll/"], ["communicator.h", "deadline_allreduce.h"]),
    ("compress", 5, ["src/compress/"],
     ["compress.h", "compress_auto.h", "compressed_allreduce.h"]),
    ("ps", 5, ["src/ps/"], ["ps.h"]),
    ("shuffle", 5, ["src/shuffle/"], ["shuffle.h"]),
    ("moe", 5, ["src/moe/"], ["moe.h"]),
    ("sim", 6, ["src/sim/"], []),
    ("front ends", 7, ["tools/", "python/src/"], ["plait.h"]),
]
PROVIDERS = ["src/transport/shm/", "src/transport/tcp/", "src/transport/ucx/"]
PROVIDER_CHOICE = "src/transport/providers.cc"
SCANNED = ["src/", "include/plait/", "tools/", "python/src/"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The (name, rank) of a repository path, or None outside the layers."""
    if path.startswith("include/plait/"):
        name = path[len("include/plait/"):]
        for layer, rank, _, public in LAYERS:
            if name in public:
                return layer, rank
        return None
    for layer, rank, folders, _ in LAYERS:
        if any(path.startswith(f) for f in folders):
            return layer, rank
    return None


def resolve(repo, includer, target):
    """The repository path an include names, or None for a header outside the repository."""
    here = os.path.dirname(includer)
    roots = [here, "src", "include", "tools"]
    if includer.startswith("python/"):
        roots.append("python/src")
    for root in roots:
        candidate = os.path.normpath(os.path.join(root, target))
        if os.path.isfile(os.path.join(repo, candidate)):
            return candidate
    return None


def exceptions(repo):
    """(includer, included) -> reason, from the table in docs/architecture.md."""
    listed = {}
    doc = os.path.join(repo, "docs", "architecture.md")
    if not os.path.isfile(doc):
        return listed
    section = False
    for line in open(doc, encoding="utf-8"):
        if line.startswith("## "):
            section = line.strip() == "## Includes that go up"
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if section and line.startswith("|") and len(cells) >= 3 and cells[0].startswith(
                ("src/", "include/", "tools/", "python/")):
            listed[(cells[0], cells[1])] = cells[2]
    return listed


def violations(repo):
    found = []
    for top in SCANNED:
        for dirpath, _, names in os.walk(os.path.join(repo, top)):
            for name in sorted(names):
                if not name.endswith((".h", ".cc")):
                    continue
                includer = os.path.relpath(os.path.join(dirpath, name), repo)
                text = open(os.path.join(repo, includer), encoding="utf-8").read()
                for target in INCLUDE.findall(text):
                    included = resolve(repo, includer, target)
                    if included is None:
                        continue
                    why = rule_broken(includer, included)
                    if why:
                        found.append((includer, included, why))
    return found


def rule_broken(includer, included):
    src, dst = layer_of(includer), layer_of(included)
    if includer.startswith("include/plait/") and not included.startswith("include/plait/"):
        return "a public header includes a private one"
    for provider in PROVIDERS:
        if (included.startswith(provider) and not includer.startswith(provider) and
                includer != PROVIDER_CHOICE and src and src[1] < 7):
            return "only the provider itself and %s include a provider" % PROVIDER_CHOICE
    if src is None or dst is None:
        return None
    if dst[1] > src[1]:
        return "%s (layer %d) includes %s (layer %d)" % (src[0], src[1], dst[0], dst[1])
    if dst[1] == src[1] and dst[0] != src[0]:
        return "the services %s and %s do not include each other" % (src[0], dst[0])
    return None


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    listed = exceptions(repo)
    found = violations(repo)
    bad = [v for v in found if (v[0], v[1]) not in listed]
    stale = sorted(set(listed) - {(v[0], v[1]) for v in found})
    for includer, included, why in bad:
        print("%s includes %s: %s" % (includer, included, why))
    for includer, included in stale:
        print("docs/architecture.md lists %s -> %s, which no longer goes up: remove the row" %
              (includer, included))
    if bad or stale:
        print("layers: %d include(s) against the layering, %d stale exception(s) "
              "(docs/architecture.md says what each layer may include)" % (len(bad), len(stale)))
        return 1
    print("layers: every include runs down (%d listed exception(s))" % len(listed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
