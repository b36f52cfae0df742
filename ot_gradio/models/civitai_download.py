"""A model file from Civitai, downloaded once into the model cache and read from there after.

A base model (or a part's own model) may be a Civitai address (config/civitai.py): most SDXL
fine-tunes people train on (Pony, Illustrious, NoobAI merges) live there. The version's record
(`/api/v1/model-versions/<id>`, public) names its files with their sizes and SHA-256; the file
chosen (the primary SafeTensor model file, or the one the download link's type/format/size/fp
ask for) is fetched from its download link with the user's API key (Civitai asks for one for every
download) as a bearer header, which httpx drops when Civitai redirects to its storage host. The
bytes go to `<file>.part` (a break resumes it with a Range request), are checked against the
record's size and SHA-256, and only then take the file's name, beside a `.civitai.json` of the
record: a file without one is never used. Pickled files (.ckpt, .pt) are refused for models and
LoRAs: loading one can run code. An embedding's `.pt` (most older Textual Inversions on Civitai
have no other file) is taken: the embedding reader loads it with `torch.load(weights_only=True)`,
which reads tensors and plain values only and refuses anything that would run code.

Kept in `<hub cache>/civitai/<version>/`, so the download watch (download_watch.py) reports its
progress with the hub's, and `huggingface_cache_dir` moves it too. Offline, or with Civitai out of
reach, a file downloaded before is used; a model's page address then means its newest version
downloaded here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config.civitai import CivitaiAddress, base_model_mismatch, civitai_address
from ..fsutil import DiskFullError, as_disk_full, atomic_write_json, free_bytes, human_bytes
from .errors import ModelLoadError

ENDPOINT_ENV = "CIVITAI_ENDPOINT"  # the API's base address (tests: a local stand-in)
TOKEN_ENVS = ("CIVITAI_TOKEN", "CIVITAI_API_KEY")
LOADABLE = (".safetensors", ".gguf")
PICKLES = (".ckpt", ".pt", ".pth", ".bin")
NOT_A_MODEL = {"lora", "locon", "dora", "lycoris", "textualinversion", "hypernetwork", "aestheticgradient", "controlnet",
               "poses", "wildcards", "workflows", "motionmodule", "upscaler", "detection"}
LORA_TYPES = {"lora", "locon", "dora", "lycoris"}  # what a LoRA field takes (LyCORIS: LoHa, LoKr, ...)
# kind of file a field takes -> (Civitai model types it takes, what to give instead); "model": a checkpoint
KINDS = {"lora": (LORA_TYPES, "a LoRA's address (LoRA, LoCon, DoRA or LyCORIS)"),
         "embedding": ({"textualinversion"}, "an embedding's address (Textual Inversion)")}
EMBEDDING_FILES = (".safetensors", ".pt", ".bin")  # read weights-only (training/embedding_files.load_embedding_tensors)
CHUNK = 8 << 20
_token: str | None = None


def use_token(token: str | None) -> None:
    """The Civitai API key this process downloads with (the run's secrets); else CIVITAI_TOKEN / CIVITAI_API_KEY."""
    global _token
    _token = (token or "").strip() or None


def civitai_token() -> str | None:
    return _token or next((os.environ[k].strip() for k in TOKEN_ENVS if os.environ.get(k, "").strip()), None)


def endpoint() -> str:
    return os.environ.get(ENDPOINT_ENV, "").strip().rstrip("/") or "https://civitai.com"


def civitai_folder(cache_dir: str | None) -> Path:
    from .download_watch import hub_cache_folder  # noqa: PLC0415

    return hub_cache_folder(cache_dir) / "civitai"


def civitai_file(value: str, field: str, *, cache_dir: str | None, offline: bool, model_type: str | None = None,
                 kind: str = "model") -> Path:
    """The local file of the Civitai address `value` (downloaded now when not yet here): of `kind`
    "model" a model (a checkpoint) to train on, "lora" a LoRA (LoCon, DoRA, LyCORIS) to start from
    or apply, "embedding" a Textual Inversion to continue or use."""
    address = civitai_address(value)
    if address is None:
        raise ModelLoadError(f"{field}: {value} is not a Civitai model address")
    if address.token_in_address:
        raise ModelLoadError(f"{field}: the address carries an API key (token=...); remove it and give the key as "
                             "General → Civitai API key")
    from huggingface_hub import constants  # noqa: PLC0415

    offline = offline or bool(constants.HF_HUB_OFFLINE)
    root = civitai_folder(cache_dir)
    where = f"{field}: {value}"
    if offline:
        cached = _cached(root, address)
        if cached is None:
            raise ModelLoadError(f"{where} has not been downloaded to {root} and offline mode is on; turn offline mode off "
                                 "to download it once, or download the file and give its path")
        return cached
    try:
        version = _version_record(address)
    except _Unreachable as err:  # Civitai out of reach: a file downloaded before still serves
        cached = _cached(root, address)
        if cached is None:
            raise ModelLoadError(f"{where}: could not reach Civitai ({err}); check the network, or download the file "
                                 "and give its path") from None
        return cached
    except _Refused as err:
        raise ModelLoadError(f"{where}: {err}") from None
    found = str((version.get("model") or {}).get("type") or "")
    if kind in KINDS and found.lower() not in KINDS[kind][0]:
        wanted = "a LoRA" if kind == "lora" else "an embedding"
        raise ModelLoadError(f"{where} is a {found or 'model of no type'}, not {wanted}; give {KINDS[kind][1]}, or leave it "
                             "blank")
    if kind == "model" and found.lower() in NOT_A_MODEL:
        raise ModelLoadError(f"{where} is a {found}, not a model to train on; give a Checkpoint's address (the model "
                             "your LoRA is for)")
    if model_type and (problem := base_model_mismatch(str(version.get("baseModel") or ""), model_type)):
        raise ModelLoadError(f"{where}: {problem}")
    entry = _choose(version.get("files") or [], address, where, embedding=kind == "embedding")
    folder = root / str(version.get("id") or address.version_id)
    return _download(entry, folder, where, {"modelId": version.get("modelId"), "modelVersionId": version.get("id"),
                                            "model": (version.get("model") or {}).get("name"), "version": version.get("name"),
                                            "baseModel": version.get("baseModel")})


def unpinned_version_note(value: str, source: str) -> str | None:
    """For a model's page address without a version: which version `source` (its downloaded file)
    is, and how to pin it, since the next start takes whatever version is newest then (a resume
    would go on from other weights than it trained on)."""
    address = civitai_address(value)
    if address is None or address.version_id is not None or address.model_id is None:
        return None
    version = Path(source).parent.name
    return (f"base_model_name: {value} names no version, so this run trains on the newest, {version} "
            f"({Path(source).name}); a later start takes whatever is newest then. To keep this one (a resume must go on "
            f"from the same weights), give https://civitai.com/models/{address.model_id}?modelVersionId={version}")


class _Unreachable(Exception):
    pass


class _Refused(Exception):
    pass


def _client(**kwargs: Any) -> Any:
    import httpx  # noqa: PLC0415

    token = civitai_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # httpx drops the Authorization header on a redirect to another host (Civitai's signed storage links)
    return httpx.Client(follow_redirects=True, headers=headers, timeout=httpx.Timeout(30.0, read=120.0), **kwargs)


def _get_json(url: str) -> Any:
    import httpx  # noqa: PLC0415

    try:
        with _client() as client:
            response = client.get(url)
    except httpx.HTTPError as err:
        raise _Unreachable(str(err) or type(err).__name__) from None
    if response.status_code == 404:
        raise _Refused("Civitai has no such model or version (or it is not published); check the address")
    if response.status_code in (401, 403):
        raise _Refused(f"Civitai refused it ({response.status_code}); {_key_advice()}")
    if response.status_code >= 500 or response.status_code == 429:
        raise _Unreachable(f"HTTP {response.status_code}")
    if response.status_code != 200:
        raise _Refused(f"Civitai answered HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise _Unreachable("its answer was not JSON") from None


def _version_record(address: CivitaiAddress) -> dict[str, Any]:
    version_id = address.version_id
    if version_id is None:  # a model's page: its newest version (Civitai lists them newest first)
        model = _get_json(f"{endpoint()}/api/v1/models/{address.model_id}")
        versions = [v for v in model.get("modelVersions") or [] if v.get("id") and v.get("status", "Published") == "Published"]
        if not versions:
            raise _Refused("the model has no published version")
        version_id = versions[0]["id"]
    record = _get_json(f"{endpoint()}/api/v1/model-versions/{int(version_id)}")
    if not isinstance(record, dict) or not isinstance(record.get("files"), list):
        raise _Unreachable("its record of the version has no file list")
    return record


def _suffix(entry: dict[str, Any]) -> str:
    return Path(str(entry.get("name") or "")).suffix.lower()


def _choose(files: list[dict[str, Any]], address: CivitaiAddress, where: str, *, embedding: bool = False) -> dict[str, Any]:
    """The file to train on: of the model files (those the download link's type/format/size/fp
    ask for), the primary first, a SafeTensor before a GGUF; a pickle never. For an `embedding`
    a Textual Inversion's file (its negative one, type Negative, only when the link asks for it),
    a SafeTensor before an A1111 `.pt` (which the embedding reader loads weights-only), primary or not."""
    def meta(entry: dict[str, Any], key: str) -> str:
        value = entry.get("type") if key == "type" else (entry.get("metadata") or {}).get(key)
        return str(value or "").lower()

    types = ("model", "pruned model") + (("negative",) if embedding else ())
    models = [f for f in files if isinstance(f, dict) and meta(f, "type") in types]
    wanted = [f for f in models if all(meta(f, k) == v.lower() for k, v in address.choice.items())]
    if not wanted:
        asked = ", ".join(f"{k}={v}" for k, v in address.choice.items())
        raise ModelLoadError(f"{where}: the version has no model file{f' with {asked}' if asked else ''}")
    suffixes = EMBEDDING_FILES if embedding else LOADABLE
    if embedding:  # its own vectors (not the negative ones), a SafeTensor before the primary
        key = lambda f: (meta(f, "type") == "negative", _suffix(f) != ".safetensors", not f.get("primary"))  # noqa: E731
    else:
        key = lambda f: (not f.get("primary"), _suffix(f) != ".safetensors")  # noqa: E731
    loadable = sorted((f for f in wanted if _suffix(f) in suffixes), key=key)
    if not loadable:
        names = ", ".join(str(f.get("name")) for f in wanted)
        if any(_suffix(f) in PICKLES for f in wanted):
            raise ModelLoadError(f"{where}: its file ({names}) is a pickle, which can run code when it is loaded; choose "
                                 "a version with a SafeTensor file, or convert it yourself and give the .safetensors path")
        raise ModelLoadError(f"{where}: its file ({names}) is not a .safetensors or .gguf model file" if not embedding else
                             f"{where}: its file ({names}) is not a .safetensors or .pt embedding file")
    return loadable[0]


def _safe_name(name: str) -> str:
    base = re.sub(r"[^\w.+()\-]", "_", Path(str(name).replace("\\", "/")).name).lstrip(".")
    return base or "model.safetensors"


def _cached(root: Path, address: CivitaiAddress) -> Path | None:
    """A file downloaded and checked before: of the version, or for a model's page the newest
    version of that model here; the download link's file choice applies."""
    found = []
    for meta_file in root.glob("*/*.civitai.json"):
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        path = meta_file.with_name(meta_file.name.removesuffix(".civitai.json"))
        version, model = meta.get("modelVersionId"), meta.get("modelId")
        if not path.is_file() or path.stat().st_size != meta.get("bytes"):
            continue
        if (address.version_id is not None and version == address.version_id) or (
                address.version_id is None and model == address.model_id):
            choice = meta.get("file") or {}
            if all(str(choice.get("type") if k == "type" else (choice.get("metadata") or {}).get(k) or "").lower() == v.lower()
                   for k, v in address.choice.items()):
                found.append((int(version or 0), path))
    return max(found)[1] if found else None


def _expected_bytes(entry: dict[str, Any]) -> int | None:
    size = entry.get("sizeKB")
    return round(float(size) * 1024) if isinstance(size, (int, float)) and size > 0 else None


def _download(entry: dict[str, Any], folder: Path, where: str, about: dict[str, Any]) -> Path:
    name = _safe_name(str(entry.get("name") or ""))
    target, meta_file, part = folder / name, folder / f"{name}.civitai.json", folder / f"{name}.part"
    sha = str((entry.get("hashes") or {}).get("SHA256") or "").lower()
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        if target.is_file() and meta_file.is_file() and (not sha or _recorded_sha(meta_file) == sha):
            return target  # downloaded and checked before (a version whose file changed downloads again)
        url = str(entry.get("downloadUrl") or "")
        if not url:
            raise ModelLoadError(f"{where}: Civitai's record of the file has no download link")
        expected = _expected_bytes(entry)
        have = part.stat().st_size if part.is_file() else 0
        free = free_bytes(folder)
        if expected and free is not None and free < expected - have + (256 << 20):
            raise ModelLoadError(f"{where}: {name} needs {human_bytes(expected - have)} more and {folder} has "
                                 f"{human_bytes(free)} free; free space there, or set General → Hugging Face cache "
                                 "folder to a bigger disk")
        digest, size = _fetch(url, part, where)
        if expected is not None and abs(size - expected) > 1024:  # sizeKB is rounded to the KB's fraction
            part.unlink(missing_ok=True)
            raise ModelLoadError(f"{where}: the download of {name} ended at {human_bytes(size)} of "
                                 f"{human_bytes(expected)}; start again")
        if sha and digest != sha:
            part.unlink(missing_ok=True)
            raise ModelLoadError(f"{where}: {name} arrived with other bytes than Civitai lists (SHA-256 {digest[:12]}… "
                                 f"against {sha[:12]}…); it was removed, start again")
        os.replace(part, target)
        atomic_write_json(meta_file, {**about, "file": entry, "bytes": size, "sha256": digest})
    return target


def _recorded_sha(meta_file: Path) -> str | None:
    try:
        return json.loads(meta_file.read_text(encoding="utf-8")).get("sha256")
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One process at a time downloads into a version's folder (a run and Tools → Sample may both ask)."""
    try:
        import fcntl  # noqa: PLC0415
    except ImportError:  # Windows: no lock
        yield
        return
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _key_advice() -> str:
    if civitai_token():
        return ("the API key given has no access to it (check General → Civitai API key; some creators allow "
                "downloads only to members)")
    return ("Civitai asks for an API key to download: create one at https://civitai.com/user/account (API Keys) and "
            "give it as General → Civitai API key")


def _fetch(url: str, part: Path, where: str) -> tuple[str, int]:
    """`url` into `part`, resuming what it holds; (SHA-256, bytes) of the whole."""
    import httpx  # noqa: PLC0415

    digest, have = hashlib.sha256(), 0
    if part.is_file():
        with open(part, "rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
                have += len(block)
    try:
        with _client() as client, client.stream("GET", url, headers={"Range": f"bytes={have}-"} if have else {}) as response:
            status = response.status_code
            if status == 416 and have:  # the part is no prefix of the file any more: from the start
                part.unlink()
                return _fetch(url, part, where)
            if status in (401, 403) or (status == 200 and "text/html" in response.headers.get("content-type", "")):
                raise ModelLoadError(f"{where}: Civitai did not send the file ({status}); {_key_advice()}")
            if status == 404:
                raise ModelLoadError(f"{where}: Civitai has no file at its download link (404); check the address")
            if status not in (200, 206):
                raise ModelLoadError(f"{where}: the download answered HTTP {status}; start again later")
            if status == 200 and have:  # the server ignored the Range: the whole file comes again
                digest, have = hashlib.sha256(), 0
            with open(part, "ab" if have else "wb") as f:
                for block in response.iter_bytes():  # as it arrives: a break keeps every byte received
                    f.write(block)
                    digest.update(block)
                    have += len(block)
    except httpx.HTTPError as err:
        raise ModelLoadError(f"{where}: the download broke off at {human_bytes(have)} ({err or type(err).__name__}); start "
                             "again to resume it") from None
    except OSError as err:
        if (full := as_disk_full(err, part.parent, what="the Civitai download")) is not None:
            raise ModelLoadError(f"{where}: {full}") from None
        raise
    except DiskFullError as err:
        raise ModelLoadError(f"{where}: {err}") from None
    return digest.hexdigest(), have
