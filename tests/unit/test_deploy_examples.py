"""deploy/ holds examples people copy: each is read here and held to the
code, so that a renamed flag, variable, route or port fails a test rather
than a deployment.

Every YAML file parses; every command line (a container's, a systemd
unit's) parses with dispatcher's own CLI parser; every DISPATCHER_*
variable named is one the settings read; every probe asks for an open
route of the admin API on the port `--http` serves; every admin token
given is long enough to be served on 0.0.0.0; every database URL names its
hosts as libpq reads them; and the HA examples say what the scaling page
says they do (synchronous replication, a multi-host URL, the operator's
secret and service)."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli.main import build_parser
from dispatcher.db import hosts
from dispatcher.ops.preflight import admin_token_problem
from dispatcher.settings import ENVIRONMENT
from dispatcher.web.admin import ROUTES, parse_bind
from dispatcher.web.routes import Access

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
YAMLS = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
KNOWN = {v.name for v in ENVIRONMENT}
OPEN_PATHS = {r.path for r in ROUTES if r.method == "GET" and r.access is Access.OPEN}
PATRONI = DEPLOY / "patroni"
CNPG = DEPLOY / "kubernetes" / "cloudnativepg"


def _entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form) from the Dockerfile."""
    line = next(
        x for x in (REPO / "Dockerfile").read_text().splitlines() if x.startswith("ENTRYPOINT")
    )
    argv: list[str] = json.loads(line.removeprefix("ENTRYPOINT"))
    return argv


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _containers() -> Iterator[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """(file, the pod's object, a container) for every pod template in deploy/."""
    for path in YAMLS:
        for doc in _docs(path):
            spec = doc.get("spec", {}) if isinstance(doc, dict) else {}
            pod = spec.get("template", {}).get("spec")
            if pod is None:
                continue
            for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                yield path, doc, c


def _argv(container: dict[str, Any]) -> list[str]:
    command = container.get("command") or _entrypoint()
    return [*command, *container.get("args", [])]


def _unit() -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((PATRONI / "dispatcher.service").read_text())
    return unit


def _env_file() -> dict[str, str]:
    out = {}
    for line in (PATRONI / "dispatcher.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def _parses(argv: list[str], where: str) -> Any:
    assert Path(argv[0]).name == "dispatcher", f"{where}: {argv} does not run dispatcher"
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{where}: `{shlex.join(argv)}` is refused by dispatcher's parser")


def test_there_are_examples() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in YAMLS}
    assert {"kubernetes/dispatcher.yaml", "kubernetes/cloudnativepg/cluster.yaml",
            "kubernetes/cloudnativepg/dispatcher.yaml", "patroni/pg1.yml",
            "patroni/pg2.yml", "patroni/etcd.yml"} <= names  # fmt: skip


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_every_yaml_parses(path: Path) -> None:
    assert _docs(path), f"{path} holds no document"


def test_every_variable_named_is_one_the_code_reads() -> None:
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            for name in re.findall(r"\bDISPATCHER_[A-Z0-9_]+", path.read_text()):
                assert name in KNOWN, f"{path.relative_to(REPO)} names {name}: not in settings"


def test_every_command_line_parses() -> None:
    seen = 0
    for path, _, c in _containers():
        if str(c.get("image", "")).startswith("dispatcher"):
            _parses(_argv(c), f"{path.relative_to(REPO)} container {c['name']}")
            seen += 1
    for key in ("ExecStartPre", "ExecStart"):
        _parses(shlex.split(_unit()["Service"][key]), f"dispatcher.service {key}")
    assert seen >= 4


def test_probes_ask_open_routes_on_the_served_port() -> None:
    probed = 0
    for path, _, c in _containers():
        args = _parses(_argv(c), path.name)
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = c.get(kind)
            if probe is None:
                continue
            get = probe["httpGet"]
            assert get["path"] in OPEN_PATHS, f"{path.name}: {kind} asks {get['path']}"
            port = ports.get(get["port"], get["port"])
            assert args.http is not None, f"{path.name}: {kind} but no --http"
            assert parse_bind(args.http)[1] == port, f"{path.name}: {kind} on {port}"
            probed += 1
    assert probed >= 5


def test_admin_tokens_are_served_on_every_address() -> None:
    tokens = [_env_file()["DISPATCHER_ADMIN_TOKEN"]]
    for path in YAMLS:
        for doc in _docs(path):
            if doc.get("kind") == "Secret" and "DISPATCHER_ADMIN_TOKEN" in doc["stringData"]:
                tokens.append(doc["stringData"]["DISPATCHER_ADMIN_TOKEN"])
    assert len(tokens) == 3
    for token in tokens:
        words, refused = admin_token_problem(token, "0.0.0.0", False)
        assert not refused, words


def _urls() -> Iterator[str]:
    yield _env_file()["DATABASE_URL"]
    for path in YAMLS:
        for doc in _docs(path):
            if doc.get("kind") == "Secret" and "DATABASE_URL" in doc.get("stringData", {}):
                yield doc["stringData"]["DATABASE_URL"]


def test_database_urls_ask_for_the_writable_host() -> None:
    for url in _urls():
        assert "target_session_attrs=read-write" in url, url
        for one in hosts.target(url).urls:
            assert "connect_timeout" not in one


def test_patroni_nodes_replicate_synchronously_and_the_workers_name_both() -> None:
    nodes = [yaml.safe_load((PATRONI / f"{n}.yml").read_text()) for n in ("pg1", "pg2")]
    assert [n["name"] for n in nodes] == ["pg1", "pg2"]
    for node in nodes:
        dcs = node["bootstrap"]["dcs"]
        assert dcs["synchronous_mode"] is True
        assert node["scope"] == nodes[0]["scope"]
        assert node["etcd3"]["hosts"] == nodes[0]["etcd3"]["hosts"]
    etcd = yaml.safe_load((PATRONI / "etcd.yml").read_text())
    members = etcd["initial-cluster"].split(",")
    assert len(members) == 3  # two cannot keep a quorum through losing one
    assert etcd["advertise-client-urls"].removeprefix("http://") in nodes[0]["etcd3"]["hosts"]
    url = _env_file()["DATABASE_URL"]
    assert hosts.hosts(url) == [n["postgresql"]["connect_address"] for n in nodes]
    argv = shlex.split(_unit()["Service"]["ExecStart"])
    assert _parses(argv, "ExecStart").processes == "auto"


def test_cloudnativepg_cluster_and_worker_fit_together() -> None:
    (cluster,) = _docs(CNPG / "cluster.yaml")
    assert cluster["kind"] == "Cluster"
    spec = cluster["spec"]
    assert (spec["instances"], spec["minSyncReplicas"], spec["maxSyncReplicas"]) == (3, 1, 1)
    name = cluster["metadata"]["name"]
    kinds = {d["kind"]: d for d in _docs(CNPG / "dispatcher.yaml")}
    assert {"Deployment", "PodDisruptionBudget", "Secret"} <= set(kinds)
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    for c in [*pod["initContainers"], *pod["containers"]]:
        env = {e["name"]: e for e in c["env"]}
        assert env["CNPG_URI"]["valueFrom"]["secretKeyRef"]["name"] == f"{name}-app"
        url = env["DATABASE_URL"]["value"]
        assert url.startswith("$(CNPG_URI)?target_session_attrs=read-write")
    selector = kinds["Deployment"]["spec"]["selector"]
    assert kinds["PodDisruptionBudget"]["spec"]["selector"] == selector
    grace = pod["terminationGracePeriodSeconds"]
    main = pod["containers"][0]
    grace_s = next(float(e["value"]) for e in main["env"] if e["name"] == "DISPATCHER_GRACE_S")
    assert grace > grace_s
