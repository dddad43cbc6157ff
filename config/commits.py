"""Commit messages as the project writes them (issue #31 item 7):

- a subject of at most 72 characters, in the imperative ("Add", not "Added" or
  "Adding"), without a final full stop;
- a blank line, then a body that says why and what was measured.

`python -m config.commits FILE` checks one message (the commit-msg hook that
`make hooks` installs); `python -m config.commits --since REF` checks every
commit after REF (`make lint` does, after origin/main). Exit status 1 and the
reasons when a message breaks a rule. No Django: it runs before anything is
installed.
"""

from __future__ import annotations

import re
import subprocess
import sys

MAX_SUBJECT = 72
# First words that are not the imperative: past tenses and gerunds, and a few
# nouns commits start with instead of saying what they do.
_NOT_IMPERATIVE_RE = re.compile(r"^(?:\w+ed|\w+ing|Fixes|Adds|Updates|Changes|WIP)\b")
_IMPERATIVE_ED = {"Embed", "Feed", "Need", "Proceed", "Seed", "Shed", "Speed"}
_IMPERATIVE_ING = {"Bring", "Ring", "Sing", "String", "Swing", "Wring", "Ping"}


def problems(message: str) -> list[str]:
    """What is wrong with a commit message; [] when it follows the rules.
    Lines git drops (# comments) are left out first."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or not lines[0].strip():
        return ["the subject is empty"]
    subject, found = lines[0], []
    if len(subject) > MAX_SUBJECT:
        found.append(
            f"the subject has {len(subject)} characters (at most {MAX_SUBJECT})"
        )
    if subject.rstrip().endswith("."):
        found.append("the subject ends with a full stop")
    first = subject.split()[0]
    if _NOT_IMPERATIVE_RE.match(first) and first not in (
        _IMPERATIVE_ED | _IMPERATIVE_ING
    ):
        found.append(f'the subject starts "{first}": say what the commit does ("Add")')
    if len(lines) < 3 or lines[1].strip():
        found.append("no body after a blank line: say why, and what was measured")
    elif not any(line.strip() for line in lines[2:]):
        found.append("the body is empty")
    return found


def since(ref: str) -> list[tuple[str, str]]:
    """(commit, message) of the commits after `ref` on HEAD, oldest first."""
    out = subprocess.run(
        ["git", "log", "--reverse", "--format=%H%x00%B%x01", f"{ref}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commits = []
    for record in out.split("\x01"):
        if "\x00" in record:
            sha, body = record.strip("\n").split("\x00", 1)
            commits.append((sha, body))
    return commits


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--since":
        ref = argv[1]
        known = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", ref], capture_output=True
        )
        if known.returncode:
            print(f"commits: {ref} is unknown here; no commit checked")
            return 0
        bad = [(sha, problems(body)) for sha, body in since(ref)]
        bad = [(sha, found) for sha, found in bad if found]
        for sha, found in bad:
            print(f"{sha[:10]}: " + "; ".join(found))
        return 1 if bad else 0
    if len(argv) == 1:
        with open(argv[0], encoding="utf-8") as handle:
            found = problems(handle.read())
        for reason in found:
            print(f"commit message: {reason}", file=sys.stderr)
        return 1 if found else 0
    print("usage: python -m config.commits FILE | --since REF", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
