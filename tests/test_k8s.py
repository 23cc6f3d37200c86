"""deploy/k8s checked offline: the Go module in deploy/k8s/validate decodes every manifest
strictly into the Kubernetes API types (no cluster, no schema download); a misspelt field
must fail it; and the memfleet command lines and router config in the manifests must be
ones memfleet accepts."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from harness import ROOT, Conn, Server, free_port, memfleet_bin

K8S = ROOT / "deploy" / "k8s"
VALIDATE = K8S / "validate"


def go() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    assert os.path.exists(found), "Go is needed for deploy/k8s/validate (scripts/setup)"
    return found


def go_test(*args: str, manifests: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if manifests is not None:
        env["MEMFLEET_K8S_DIR"] = str(manifests)
    return subprocess.run(
        [go(), "test", "-count=1", *args, "./..."],
        cwd=VALIDATE,
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    for doc in documents():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in deploy/k8s")


def test_manifests_decode_strictly_and_agree() -> None:
    result = go_test("-v")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in (
        "TestManifestsDecodeStrictlyAndAgree",
        "TestMisspeltFieldsFail",
        "TestInconsistentObjectsFail",
    ):
        assert f"--- PASS: {name}" in result.stdout, result.stdout


def test_a_misspelt_field_in_a_copy_fails_validation(tmp_path: Path) -> None:
    for path in K8S.glob("*.yaml"):
        text = path.read_text()
        if path.name == "serve.yaml":
            assert "  replicas: 3" in text
            text = text.replace("  replicas: 3", "  replicaz: 3")
        (tmp_path / path.name).write_text(text)
    result = go_test("-run", "TestManifestsDecodeStrictlyAndAgree", manifests=tmp_path)
    assert result.returncode != 0, result.stdout
    assert 'unknown field "spec.replicaz"' in result.stdout, result.stdout


def test_route_configmap_is_a_config_memfleet_route_accepts(tmp_path: Path) -> None:
    cm = find("ConfigMap", "memfleet-route")
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(cm["data"]["nutcracker.yml"])
    check = subprocess.run(
        [memfleet_bin(), "route", "-t", "-c", str(conf)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    deployment = find("Deployment", "memfleet-route")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["route", "-c", "/etc/memfleet/nutcracker.yml"], args


def test_serve_statefulset_args_start_memfleet_serve() -> None:
    sts = find("StatefulSet", "memfleet")
    args = list(sts["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args[0] == "serve"
    # The manifest's flags as written, on a free loopback port with a small cache.
    port = free_port()
    args[args.index("-p") + 1] = str(port)
    args[args.index("-m") + 1] = "16"
    with Server([memfleet_bin(), *args, "-l", "127.0.0.1"], port=port), Conn(port) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION "), "not a memcached reply"
