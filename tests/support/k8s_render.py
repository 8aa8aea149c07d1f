"""Rendering the Kubernetes manifests (and picking documents out of them) for the k8s, restricted and router tests."""

from __future__ import annotations

import copy

import kubernetes_validate

from tests.deploy.conftest import K8S, load_yaml, load_yaml_all

VERSIONS = sorted({"1.30", kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version())})


CLUSTER_SCOPED = {"Namespace"}


# --- a minimal kustomize -----------------------------------------------------------------
def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(doc: dict, ops: list[dict]) -> dict:
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if op["op"] == "remove":
            if isinstance(node, list):
                del node[int(last)]
            else:
                del node[last]  # KeyError = the patch does not apply, like kustomize
        elif op["op"] in {"add", "replace"}:
            if op["op"] == "replace":
                assert (last in node) if isinstance(node, dict) else int(last) < len(node), op
            if isinstance(node, list):
                node.insert(int(last), op["value"]) if op["op"] == "add" else node.__setitem__(int(last), op["value"])
            else:
                node[last] = op["value"]
        else:
            raise AssertionError(f"unsupported op {op}")
    return doc


def _set_images(resources: list[dict], images: list[dict]) -> None:
    for res in resources:
        spec = res.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            name = container["image"].split("@")[0].rsplit(":", 1)[0] if ":" in container["image"].split("/")[-1] \
                else container["image"]
            for image in images:
                if image["name"] == name:
                    new = image.get("newName", name)
                    tag = image.get("newTag", container["image"][len(name) + 1:] if container["image"] != name else "")
                    container["image"] = f"{new}:{tag}" if tag else new


def render(directory) -> list[dict]:
    kust = load_yaml(directory / "kustomization.yaml")
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and kust["kind"] == "Kustomization"
    resources: list[dict] = []
    for entry in kust.get("resources", []):
        path = (directory / entry).resolve()
        resources += render(path) if path.is_dir() else load_yaml_all(path)
    if "namespace" in kust:
        for res in resources:
            if res["kind"] not in CLUSTER_SCOPED:
                res["metadata"]["namespace"] = kust["namespace"]
    _set_images(resources, kust.get("images", []))
    for patch in kust.get("patches", []):
        target = patch["target"]
        ops = __import__("yaml").safe_load(patch["patch"])
        hits = [i for i, r in enumerate(resources) if r["kind"] == target["kind"] and r["metadata"]["name"] == target["name"]
                and r["apiVersion"] == "/".join(p for p in (target.get("group"), target.get("version")) if p)]
        assert len(hits) == 1, f"patch target {target} matched {len(hits)} resources"
        resources[hits[0]] = json_patch(resources[hits[0]], ops)
    return resources


RENDERS = {"base": K8S / "base", "nvidia": K8S / "overlays/nvidia"}


def by_kind(resources: list[dict], kind: str) -> list[dict]:
    return [r for r in resources if r["kind"] == kind]


def one(resources, kind) -> dict:
    (res,) = by_kind(resources, kind)
    return res


def named(resources, kind, name) -> dict:
    (res,) = [r for r in by_kind(resources, kind) if r["metadata"]["name"] == name]
    return res
