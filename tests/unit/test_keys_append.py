"""`campusguard keys new --append FILE` keeps the keys file's owner and mode (issue 42).

docs/security.md has the operator append with sudo to deploy/secrets/api-keys.yaml, which is
0400 and belongs to the replicas' user (10001): a rewrite owned by root would lock the
replicas out of their own keys file.
"""

from __future__ import annotations

import argparse
import os
import stat

import pytest

from app.commands import keys as keys_command
from app.core.keys import parse_keys_file
from tests.support.logwatch import WATCH


def append(path, name: str, capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    keys_command.configure(parser)
    code = keys_command.run(parser.parse_args(["new", "--role", "viewer", "--name", name, "--append", str(path)]))
    out = capsys.readouterr()
    for line in out.out.splitlines():
        WATCH.remember(line.strip())
    return code, out.out, out.err


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_append_as_root_keeps_the_files_owner_and_mode(tmp_path, capsys):
    path = tmp_path / "api-keys.yaml"
    path.write_text("# the replicas' keys\n- {name: admin, role: admin, sha256: " + "a" * 64 + "}\n")
    os.chown(path, 10001, 100)
    path.chmod(0o400)
    code, out, err = append(path, "erin", capsys)
    assert code == 0, err
    st = path.stat()
    assert (st.st_uid, st.st_gid, oct(stat.S_IMODE(st.st_mode))) == (10001, 100, oct(0o400))
    text = path.read_text()
    assert text.startswith("# the replicas' keys\n") and {e.name for e in parse_keys_file(text.encode())} == {
        "admin", "erin"}
    assert out.strip() and out.strip() not in text  # the secret is printed, only its SHA-256 is stored
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temporary file was left behind"


def test_a_new_file_is_0600_and_an_existing_one_keeps_its_mode(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    assert append(path, "carol", capsys)[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o440)
    assert append(path, "dave", capsys)[0] == 0
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o440 and (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
    assert {e.name for e in parse_keys_file(path.read_bytes())} == {"carol", "dave"}


def test_an_owner_this_process_may_not_give_back_changes_nothing(tmp_path, capsys, monkeypatch):
    """Not root and the file is another user's: a clear error, the file untouched, no
    temporary left (os.chown refuses as it would for a user)."""
    path = tmp_path / "keys.yaml"
    path.write_text("- {name: admin, role: admin, sha256: " + "b" * 64 + "}\n")
    before = path.read_bytes()
    real = os.stat

    def foreign(p, *args, **kwargs):  # the file looks like someone else's
        st = real(p, *args, **kwargs)
        if str(p) == str(path):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 4242, 4242, *tuple(st)[6:]))
        return st

    def refuse(*_args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("app.core.files.os.chown", refuse)
    monkeypatch.setattr("pathlib.Path.stat", lambda self, **kw: foreign(self, **kw))
    code, out, err = append(path, "erin", capsys)
    assert code == 2 and "cannot write" in err and "nothing was changed" in err
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["keys.yaml"]
