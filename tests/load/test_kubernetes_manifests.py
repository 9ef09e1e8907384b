"""The Kubernetes manifests (deploy/kubernetes) against the Kubernetes API schemas, offline
(kubernetes-validate ships them), and against servecheck itself: the container arguments parse
as ``servecheck load`` options, the ConfigMap's targets.yaml and plan load, and the pieces point
at each other (Service selector, Secret and ConfigMap keys, worker count)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from servecheck.commands.load import add_arguments, spec_from_args
from servecheck.load.run import validate

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes still commonly run, and the newest the package ships.
VERSIONS = ("1.28.0", kubernetes_validate.latest_version())


def _docs() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


DOCS = _docs()


def test_the_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kust["resources"]) == files
    assert set(DOCS) == {
        "ConfigMap/servecheck-config",
        "Secret/servecheck-api-key",
        "PersistentVolumeClaim/servecheck-reports",
        "Service/servecheck-master",
        "Job/servecheck-master",
        "Deployment/servecheck-worker",
    }


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(DOCS))
def test_manifest_is_valid_for_kubernetes(name: str, version: str) -> None:
    # strict: an unknown or misspelt field is an error, not silently dropped by the API server
    kubernetes_validate.validate(DOCS[name], version, strict=True)


def test_the_validator_catches_a_wrong_manifest() -> None:
    """The check above can fail: a misspelt field and a port given as text are both rejected."""
    job = yaml.safe_load(yaml.safe_dump(DOCS["Job/servecheck-master"]))
    job["spec"]["template"]["spec"]["containers"][0]["port"] = 5557
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, VERSIONS[0], strict=True)
    svc = yaml.safe_load(yaml.safe_dump(DOCS["Service/servecheck-master"]))
    svc["spec"]["ports"][0]["port"] = "five"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(svc, VERSIONS[0], strict=True)


def _pod(kind_name: str) -> dict[str, Any]:
    return DOCS[kind_name]["spec"]["template"]


def _container(kind_name: str) -> dict[str, Any]:
    (c,) = _pod(kind_name)["spec"]["containers"]
    return c


def _args(kind_name: str, tmp_path: Path) -> argparse.Namespace:
    """The container's arguments parsed as servecheck's own CLI, with $(VAR) from its env and the
    ConfigMap's files where it mounts them."""
    config = DOCS["ConfigMap/servecheck-config"]["data"]
    c = _container(kind_name)
    env = {e["name"]: e for e in c["env"]}
    assert c["args"][0] == "load"
    args = []
    for a in c["args"][1:]:
        for var in re.findall(r"\$\((\w+)\)", a):
            ref = env[var]["valueFrom"]["configMapKeyRef"]
            assert ref["name"] == "servecheck-config"
            a = a.replace(f"$({var})", config[ref["key"]])
        args.append(a.replace("/etc/servecheck", str(tmp_path)))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(args)


def test_master_and_workers_run_the_same_plan_and_find_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = DOCS["ConfigMap/servecheck-config"]["data"]
    for name in ("targets.yaml", "plan.yaml"):
        (tmp_path / name).write_text(config[name])
    monkeypatch.setenv("SERVECHECK_FLEET_API_KEY", "sk-from-the-secret")
    master = _args("Job/servecheck-master", tmp_path)
    worker = _args("Deployment/servecheck-worker", tmp_path)
    m_spec, w_spec = spec_from_args(master), spec_from_args(worker)
    validate(m_spec)  # a usable master: one mode, bounded, a run id
    validate(w_spec)
    assert (m_spec.role, w_spec.role) == ("master", "worker")
    assert m_spec.run_id == w_spec.run_id == config["run-id"]
    assert (m_spec.users, m_spec.duration_s) == (64, 300.0)
    assert (m_spec.scenario, m_spec.duration_s) == (w_spec.scenario, w_spec.duration_s)
    assert m_spec.target.auth_headers() == {"Authorization": "Bearer sk-from-the-secret"}
    replicas = DOCS["Deployment/servecheck-worker"]["spec"]["replicas"]
    assert m_spec.expect_workers == w_spec.expect_workers == replicas
    svc = DOCS["Service/servecheck-master"]
    assert w_spec.master_host == svc["metadata"]["name"]
    (port,) = svc["spec"]["ports"]
    assert w_spec.master_port == m_spec.master_port == port["port"]
    master_ports = {
        p["name"]: p["containerPort"] for p in _container("Job/servecheck-master")["ports"]
    }
    assert master_ports[port["targetPort"]] == m_spec.master_port
    labels = _pod("Job/servecheck-master")["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    # The key comes from the Secret, never from the ConfigMap.
    secret = DOCS["Secret/servecheck-api-key"]
    for kind_name in ("Job/servecheck-master", "Deployment/servecheck-worker"):
        env = {e["name"]: e for e in _container(kind_name)["env"]}
        ref = env["SERVECHECK_FLEET_API_KEY"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    assert "${SERVECHECK_FLEET_API_KEY}" in config["targets.yaml"]


def test_only_the_master_mounts_the_reports_volume() -> None:
    master_vols = _pod("Job/servecheck-master")["spec"]["volumes"]
    worker_vols = _pod("Deployment/servecheck-worker")["spec"]["volumes"]
    claim = DOCS["PersistentVolumeClaim/servecheck-reports"]["metadata"]["name"]
    assert any(v.get("persistentVolumeClaim", {}).get("claimName") == claim for v in master_vols)
    assert not any("persistentVolumeClaim" in v for v in worker_vols)  # no shared disk
    job = DOCS["Job/servecheck-master"]["spec"]
    assert job["backoffLimit"] == 0 and job["template"]["spec"]["restartPolicy"] == "Never"
