"""The deployment files under deploy/: they parse, and they match the schemas of the tools that read them.

- deploy/prefect.yaml against Prefect 3's prefect.yaml model (the field names of the installed
  Prefect's `prefect/cli/deploy/_models.py`, read from its source, as importing Prefect takes
  seconds), the flow it names (flows/nightly.py, read with `ast`) and a valid cron schedule;
- deploy/ray-cluster.yaml against `ray/autoscaler/ray-schema.json` of the installed Ray (with
  jsonschema) plus the checks `ray up` adds (head_node_type among the node types, min <= max);
- deploy/kuberay-raycluster.yaml against KubeRay's ray.io/v1 RayCluster fields;
- no credential is written anywhere under deploy/.

No network, no Prefect or Ray import: well under a second.
"""

from __future__ import annotations

import ast
import datetime as dt
import importlib.metadata
import importlib.util
import json
import re
import sys
import zoneinfo
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
PREFECT_YAML = DEPLOY / "prefect.yaml"
RAY_CLUSTER = DEPLOY / "ray-cluster.yaml"
KUBERAY = DEPLOY / "kuberay-raycluster.yaml"
YAML_FILES = [PREFECT_YAML, RAY_CLUSTER, KUBERAY]

WORK_POOL = "chakra-pool"
STEP_SET_WORKING_DIRECTORY = "prefect.deployments.steps.set_working_directory"
# Prefect's placeholder syntax (prefect.utilities.templating.PLACEHOLDER_CAPTURE_REGEX)
PLACEHOLDER = re.compile(r"{{\s*([\w\.\-\[\]$]+)\s*}}")


def load(path: Path):
    with open(path) as f:
        return yaml.safe_load(f)


def package_dir(name: str) -> Path | None:
    """Where an installed top-level package lives, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


# --- Prefect's prefect.yaml model ---------------------------------------------------------------

# prefect 3.8.8, prefect/cli/deploy/_models.py; used when that file cannot be read. Prefect
# ignores unknown keys (extra="ignore") except in schedules (extra="forbid"), so a misspelt key
# would silently do nothing: these sets catch it.
KNOWN_FIELDS = {
    "PrefectYamlModel": {"prefect-version", "prefect_version", "name", "build", "push", "pull", "deployments"},
    "DeploymentConfig": {"name", "version", "version_type", "tags", "description", "schedule", "schedules", "paused",
                         "concurrency_limit", "flow_name", "entrypoint", "parameters", "enforce_parameter_schema",
                         "build", "push", "pull", "work_pool", "triggers", "sla"},
    "WorkPoolConfig": {"name", "work_queue_name", "job_variables"},
    "RawScheduleConfig": {"cron", "interval", "rrule", "timezone", "anchor_date", "active", "parameters", "slug",
                          "replaces", "day_or"},
}


def _model_fields_from_source(path: Path) -> dict[str, set[str]]:
    """Field names (and aliases) of the pydantic models in a source file."""
    fields: dict[str, set[str]] = {}
    for cls in ast.parse(path.read_text()).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        names = set()
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if stmt.target.id == "model_config":
                    continue
                names.add(stmt.target.id)
                if isinstance(stmt.value, ast.Call):
                    names.update(kw.value.value for kw in stmt.value.keywords
                                 if kw.arg == "alias" and isinstance(kw.value, ast.Constant))
        fields[cls.name] = names
    return fields


@pytest.fixture(scope="module")
def prefect_fields() -> dict[str, set[str]]:
    prefect = package_dir("prefect")
    source = prefect / "cli" / "deploy" / "_models.py" if prefect else None
    if source is not None and source.is_file():
        found = _model_fields_from_source(source)
        if all(found.get(model) for model in KNOWN_FIELDS):
            return found
    return KNOWN_FIELDS


@pytest.fixture(scope="module")
def prefect_yaml() -> dict:
    return load(PREFECT_YAML)


@pytest.fixture(scope="module")
def nightly(prefect_yaml) -> dict:
    named = [d for d in prefect_yaml.get("deployments") or [] if d.get("name") == "nightly"]
    assert len(named) == 1, "prefect.yaml: expected exactly one deployment named `nightly`"
    return named[0]


def _flow_function(path: Path, name: str) -> ast.FunctionDef:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{path.relative_to(REPO)} defines no top-level function `{name}`")


def _is_flow_decorator(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "flow") or (
        isinstance(target, ast.Attribute) and target.attr == "flow")


# --- all files ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.name)
def test_yaml_files_parse(path):
    assert isinstance(load(path), dict), f"{path.name}: not a YAML mapping"


# --- deploy/prefect.yaml --------------------------------------------------------------------------

def test_prefect_yaml_keys_are_known_to_prefect(prefect_yaml, nightly, prefect_fields):
    assert set(prefect_yaml) <= prefect_fields["PrefectYamlModel"], (
        f"unknown top-level keys: {set(prefect_yaml) - prefect_fields['PrefectYamlModel']}")
    assert set(nightly) <= prefect_fields["DeploymentConfig"], (
        f"unknown deployment keys: {set(nightly) - prefect_fields['DeploymentConfig']}")
    assert set(nightly["work_pool"]) <= prefect_fields["WorkPoolConfig"]
    assert "schedule" not in nightly, "use `schedules` (a list); `schedule` is deprecated"


def test_entrypoint_is_the_nightly_flow(nightly):
    file, _, function = nightly["entrypoint"].partition(":")
    assert (file, function) == ("flows/nightly.py", "nightly")
    path = REPO / file  # entrypoints are relative to the repository root, where `prefect deploy` runs
    assert path.is_file(), f"{file} does not exist (yet): the entrypoint of the `nightly` deployment"
    node = _flow_function(path, function)
    assert any(_is_flow_decorator(d) for d in node.decorator_list), f"{file}:{function} is not a @flow"


def test_parameters_are_arguments_of_the_flow(nightly):
    file, _, function = nightly["entrypoint"].partition(":")
    if not (REPO / file).is_file():
        pytest.fail(f"{file} does not exist (yet)")
    args = _flow_function(REPO / file, function).args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    parameters = nightly.get("parameters") or {}
    assert isinstance(parameters, dict)
    assert set(parameters) <= names, f"not parameters of the flow: {set(parameters) - names}"
    for schedule in nightly["schedules"]:
        assert set(schedule.get("parameters") or {}) <= names


def test_flow_defaults_are_what_the_deployment_shows(nightly):
    """`prefect deploy` evaluates the defaults from the source without the module's __file__ (a
    computed default shows as None in the deployment): each is a literal or a module constant,
    and a None default is explained in the docstring's Args ("none: ...")."""
    file, _, function = nightly["entrypoint"].partition(":")
    node = _flow_function(REPO / file, function)
    docstring = ast.get_docstring(node) or ""
    args = node.args.args[len(node.args.args) - len(node.args.defaults):]
    for arg, default in zip(args, node.args.defaults):
        if isinstance(default, ast.Constant) and default.value is None:
            assert re.search(rf"^\s*{arg.arg}: .*\bnone: ", docstring, re.M), f"{arg.arg}: None, unexplained"
        else:
            assert isinstance(default, (ast.Constant, ast.Name)), f"{arg.arg}: computed default"


def test_schedule_is_a_valid_nightly_cron(nightly, prefect_fields):
    from cronsim import CronSim, CronSimError  # installed with Prefect, which validates crons with it

    schedules = nightly["schedules"]
    assert isinstance(schedules, list) and len(schedules) == 1
    schedule = schedules[0]
    assert set(schedule) <= prefect_fields["RawScheduleConfig"], (
        f"keys Prefect rejects in a schedule: {set(schedule) - prefect_fields['RawScheduleConfig']}")
    assert [k for k in ("cron", "interval", "rrule") if k in schedule] == ["cron"]
    assert schedule.get("active", True) is True
    tz = zoneinfo.ZoneInfo(schedule.get("timezone", "UTC"))
    assert str(tz) == "UTC"
    try:
        runs = CronSim(schedule["cron"], dt.datetime(2026, 3, 1, tzinfo=tz))
    except CronSimError as e:
        pytest.fail(f"invalid cron {schedule['cron']!r}: {e}")
    first, second, third = next(runs), next(runs), next(runs)
    assert second - first == third - second == dt.timedelta(days=1), "expected one run a day"
    assert first.hour < 8, "expected a run at night (UTC)"


def test_work_pool(nightly):
    assert nightly["work_pool"]["name"] == WORK_POOL


def test_pull_step_sets_the_working_directory(prefect_yaml, nightly):
    steps = nightly.get("pull", prefect_yaml.get("pull"))
    assert isinstance(steps, list) and steps, "no pull steps: the worker would not know where the checkout is"
    first = steps[0]
    assert list(first) == [STEP_SET_WORKING_DIRECTORY]
    directory = first[STEP_SET_WORKING_DIRECTORY]["directory"]
    assert isinstance(directory, str) and directory


def test_tags_and_placeholders(prefect_yaml, nightly):
    assert nightly["tags"] and all(isinstance(t, str) for t in nightly["tags"])
    text = yaml.safe_dump(prefect_yaml)
    # Only environment placeholders ({{ $VAR }}): no blocks or variables that a server must hold.
    assert all(p.startswith("$") for p in PLACEHOLDER.findall(text)), PLACEHOLDER.findall(text)


# --- deploy/ray-cluster.yaml ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster() -> dict:
    return load(RAY_CLUSTER)


def test_ray_cluster_required_keys(ray_cluster):
    for key in ("cluster_name", "provider", "available_node_types", "head_node_type", "max_workers"):
        assert key in ray_cluster, f"ray-cluster.yaml: missing {key}"
    assert ray_cluster["provider"]["type"] == "aws" and ray_cluster["provider"]["region"]
    node_types = ray_cluster["available_node_types"]
    head = ray_cluster["head_node_type"]
    assert head in node_types, "head_node_type must be one of available_node_types"
    workers = {name: spec for name, spec in node_types.items() if name != head}
    assert workers, "no worker node type"
    max_workers = ray_cluster["max_workers"]
    assert isinstance(max_workers, int) and max_workers >= 1
    # The same checks as ray.autoscaler._private.util.validate_config, plus per type min <= max.
    assert sum(spec.get("min_workers", 0) for spec in node_types.values()) <= max_workers
    for name, spec in workers.items():
        assert "node_config" in spec and "resources" in spec, name
        assert spec.get("min_workers", 0) <= spec.get("max_workers", max_workers) <= max_workers, name


def test_ray_cluster_matches_rays_schema(ray_cluster):
    import jsonschema
    ray = package_dir("ray")
    assert ray is not None, "Ray is in requirements.lock: a set-up without it is broken"
    schema = json.loads((ray / "autoscaler" / "ray-schema.json").read_text())  # shipped with Ray
    jsonschema.validate(ray_cluster, schema)  # what `ray up` checks first (validate_config)


def test_ray_cluster_installs_the_checkout(ray_cluster):
    (remote, local), = ray_cluster["file_mounts"].items()
    assert local == ".", "the checkout `ray up` runs in is synced to the nodes"
    assert ".gitignore" in ray_cluster.get("rsync_filter", []), "the .venv and out/ stay home"
    commands = " && ".join(ray_cluster["setup_commands"])
    assert f"cd {remote}" in commands and re.search(r"pip install .*\.\[s3\]", commands)


def test_cluster_versions_match_the_environment(ray_cluster):
    """Ray Client (RAY_ADDRESS=ray://...) needs the same Ray and Python versions on both ends."""
    version = importlib.metadata.version("ray")  # Ray is in requirements.lock: missing is a broken set-up
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    image = ray_cluster["docker"]["image"]
    assert image.startswith(f"rayproject/ray:{version}-{python}"), (image, version, python)
    assert load(KUBERAY)["spec"]["rayVersion"] == version
    assert f"FROM rayproject/ray:{version}-{python}" in (DEPLOY / "Dockerfile").read_text()


# --- deploy/kuberay-raycluster.yaml ---------------------------------------------------------------

@pytest.fixture(scope="module")
def raycluster() -> dict:
    return load(KUBERAY)


def _containers(raycluster: dict) -> list[dict]:
    spec = raycluster["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def test_kuberay_raycluster_structure(raycluster):
    assert raycluster["apiVersion"] == "ray.io/v1"
    assert raycluster["kind"] == "RayCluster"
    assert raycluster["metadata"]["name"]
    spec = raycluster["spec"]
    head = spec["headGroupSpec"]
    assert head["template"]["spec"]["containers"], "head pod has no containers"
    workers = spec["workerGroupSpecs"]
    assert isinstance(workers, list) and workers
    for group in [head, *workers]:
        # rayStartParams is map[string]string in the CRD: unquoted numbers or booleans are rejected.
        assert all(isinstance(v, str) for v in (group.get("rayStartParams") or {}).values())
    for group in workers:
        assert group["groupName"]
        assert group["template"]["spec"]["containers"], f"worker group {group['groupName']} has no containers"
        assert 0 <= group.get("minReplicas", 0) <= group.get("replicas", 0) <= group.get("maxReplicas", 2**31 - 1)
    images = {c["image"] for c in _containers(raycluster)}
    assert len(images) == 1 and all(images), "head and workers must run the same (non-empty) image"
    for container in _containers(raycluster):
        assert container["name"] and container["resources"]["limits"], container["name"]


def test_kuberay_s3_settings_come_from_a_secret(raycluster):
    for container in _containers(raycluster):
        refs = [e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e]
        refs += [e["valueFrom"]["secretKeyRef"]["name"] for e in container.get("env", [])
                 if "secretKeyRef" in e.get("valueFrom", {})]
        assert refs, f"container {container['name']}: S3 settings must come from a Secret"


# --- no credentials -------------------------------------------------------------------------------

SENSITIVE = re.compile(r"secret|password|passwd|access_?key|token|credential|private_?key", re.IGNORECASE)


def literal_credentials(document, where: str = "") -> list[str]:
    """Paths of values that look like literal credentials: a sensitive key with a scalar value
    (a Kubernetes-style `{name: SENSITIVE, value: ...}` too). References are fine: mappings
    (secretRef, secretKeyRef, valueFrom), empty values and `{{ $ENV }}` placeholders."""
    found = []

    def literal(value) -> bool:
        if value is None or isinstance(value, (dict, list, bool)):
            return False
        text = str(value).strip()
        return bool(text) and not re.fullmatch(r"{{\s*\$\w+\s*}}", text)

    if isinstance(document, dict):
        if isinstance(document.get("name"), str) and SENSITIVE.search(document["name"]) and literal(
                document.get("value")):
            found.append(f"{where}/{document['name']}")
        for key, value in document.items():
            if SENSITIVE.search(str(key)) and literal(value):
                found.append(f"{where}/{key}")
            found += literal_credentials(value, f"{where}/{key}")
    elif isinstance(document, list):
        for i, item in enumerate(document):
            found += literal_credentials(item, f"{where}[{i}]")
    return found


def test_the_credential_check_finds_credentials():
    assert literal_credentials({"auth": {"password": "hunter2"}}) == ["/auth/password"]
    assert literal_credentials({"env": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "abc"}]})
    assert literal_credentials({"aws_access_key_id": "AKIA0000000000000000"})
    assert not literal_credentials({"envFrom": [{"secretRef": {"name": "s3"}}], "key": "{{ $AWS_ACCESS_KEY_ID }}"})
    assert not literal_credentials({"env": [{"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {}}}]})


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.name)
def test_no_literal_credentials_in_yaml(path):
    assert literal_credentials(load(path)) == []


def test_no_key_material_in_deploy():
    patterns = [re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
                re.compile(r"://[^/\s:@]+:[^/\s@]+@")]  # user:password@host inside a URL
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        text = path.read_text()
        for pattern in patterns:
            assert not pattern.search(text), f"{path.relative_to(REPO)}: {pattern.pattern}"


def test_deployment_guide_documents_these_files(nightly):
    readme = (REPO / "docs" / "deployment.md").read_text()
    for text in ("prefect deploy --all --prefect-file deploy/prefect.yaml", f"--pool {nightly['work_pool']['name']}",
                 "ray up", "deploy/ray-cluster.yaml", "kubectl apply -f deploy/kuberay-raycluster.yaml",
                 "RAY_ADDRESS", "PREFECT_API_URL", "AWS_ENDPOINT_URL"):
        assert text in readme, f"docs/deployment.md does not mention {text!r}"
