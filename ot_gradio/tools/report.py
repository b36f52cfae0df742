"""Dataset report: what training will really see, concept by concept, before it starts.

OneTrainer does not show this and its users lose images without knowing. Per concept: the image
count; captions and masks found and missing (by name); the size range; the files that cannot be
read (by name, with the reason); the aspect buckets at the chosen resolutions; and the images
that can never be trained because every bucket they can land in holds fewer samples than one
batch. A concept whose folder is missing or has no readable image is reported as such, and the
others are still reported. Pure Python (PIL, no torch): it runs in a job worker only because
decoding thousands of images takes a while.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.families import FAMILIES
from ..data.buckets import Bucketing
from ..data.errors import DataError
from ..data.planning import plan_epoch
from ..data.prepare import prepare_concepts
from ..data.summary import summarize
from ..data.video import run_sampling
from .jobs import Job, JobError

LIST_LIMIT = 200  # names listed per kind; the counts are always complete


def _names(paths: list[Path], folder: Path) -> list[str]:
    out = []
    for path in paths:
        try:
            out.append(Path(path).relative_to(folder).as_posix())
        except ValueError:
            out.append(str(path))
    return out


def _limited(names: list[str]) -> dict[str, Any]:
    return {"count": len(names), "names": names[:LIST_LIMIT]}


def _concept_details(prepared) -> dict[str, Any]:
    scan = prepared.scan
    items = scan.items
    folder = scan.folder
    widths = [i.width for i in items]
    heights = [i.height for i in items]
    no_caption = [i.path for i in items if not any(c.strip() for c in i.captions)]
    no_mask = [i.path for i in items if i.mask_path is None]
    clips = [i for i in items if i.sampling is not None]
    return {
        "clips": len(clips),  # of the items (a video family's concept); each trains with `frames`
        "clip_frames": sum(i.frames for i in clips),
        "captions_found": len(items) - len(no_caption),
        "captions_missing": _limited(_names(no_caption, folder)),
        "masks_found": scan.mask_count,
        "masks_missing": _limited(_names(no_mask, folder)),
        "transparent_images": _limited(_names(scan.transparent, folder)),
        "size_range": {"min": [min(widths), min(heights)], "max": [max(widths), max(heights)]} if items else None,
        "unreadable": [{"name": n, "reason": s.reason} for n, s in zip(_names([s.path for s in scan.skipped], folder), scan.skipped, strict=True)],
        "warnings": list(scan.warnings),
    }


def build_report(config: dict[str, Any], resolution: str | None = None, batch_size: int | None = None,
                 job: Job | None = None) -> dict[str, Any]:
    """The report for the enabled concepts of `config` (our config dict), at `resolution` and
    `batch_size` (default: the config's)."""
    from ..config.io import ConfigError, load_config  # noqa: PLC0415 - pydantic only

    job = job or Job()
    try:
        cfg = load_config(dict(config)).config
    except ConfigError as err:
        raise JobError(f"config: {err}") from None
    resolution = str(resolution or cfg.resolution)
    batch = max(1, int(batch_size or cfg.batch_size))
    family = FAMILIES.get(cfg.model_type)
    bucketing = Bucketing.from_config(cfg, family.bucket_step if family else None)
    frames = run_sampling(cfg, family.frame_step if family else None)  # a video family: clips are items too
    concepts = [c for c in cfg.concepts if c.enabled]
    if not concepts:
        raise JobError("concepts: no enabled concept; add a concept folder in the Concepts tab")

    prepared, failed, warnings = [], [], []
    for index, concept in enumerate(concepts):
        job.check()
        job.progress(index, len(concepts), f"scanning {concept.name or concept.path}")
        try:
            # as training finds them: an editing model's pairs, a depth model's `-depth` maps (not images)
            found, found_warnings = prepare_concepts([concept], resolution, bucketing=bucketing,
                                                       frames=frames, control=bool(family and family.control_image),
                                                       depth=bool(family and family.depth_maps), masked_training=cfg.masked_training)
        except DataError as err:
            if str(err).startswith("resolution:"):
                raise JobError(str(err)) from None
            failed.append({"name": concept.name or Path(concept.path).name, "folder": concept.path, "error": str(err)})
            continue
        prepared += found
        warnings += found_warnings
    job.progress(len(concepts), len(concepts), "planning buckets")

    report: dict[str, Any] = {"resolution": resolution, "batch_size": batch, "concepts": [], "failed_concepts": failed,
                              "never_trained": 0, "steps_per_epoch": 0, "samples_per_epoch": 0, "warnings": warnings}
    if prepared:
        plan = plan_epoch(prepared, 0, int(cfg.seed), batch, cached=cfg.latent_caching)
        summary = summarize(prepared, plan, batch)
        for row, concept in zip(summary["concepts"], prepared, strict=True):
            row.update(_concept_details(concept))
            if family and family.depth_maps:  # the others are estimated by the model
                row["depth_maps_found"] = concept.scan.depth_count
            row["never_trained"] = [{**n, "name": _names([Path(n["path"])], concept.scan.folder)[0]} for n in row["never_trained"]]
        report.update(concepts=summary["concepts"], never_trained=summary["never_trained"],
                      steps_per_epoch=summary["steps_per_epoch"], samples_per_epoch=summary["samples_per_epoch"],
                      dropped_samples=summary["dropped_samples"])
    report["message"] = headline(report)
    return report


def headline(report: dict[str, Any]) -> str:
    images = sum(c["images"] for c in report["concepts"])
    unreadable = sum(len(c["unreadable"]) for c in report["concepts"])
    parts = [f"{images} images in {len(report['concepts'])} concept(s)", f"{report['steps_per_epoch']} steps per epoch at batch {report['batch_size']}"]
    if report["never_trained"]:
        parts.append(f"{report['never_trained']} image(s) will never be trained")
    if unreadable:
        parts.append(f"{unreadable} unreadable file(s)")
    if report["failed_concepts"]:
        parts.append(f"{len(report['failed_concepts'])} concept(s) cannot be used")
    return "; ".join(parts)


def bucket_rows(report: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(bucket "WxH", concept name, images) for the chart."""
    return [(bucket, c["name"], n) for c in report["concepts"] for bucket, n in c["buckets"].items()]


def to_markdown(report: dict[str, Any]) -> str:
    lines = [f"**{report['message']}** (resolution {report['resolution']})"]
    for failed in report["failed_concepts"]:
        lines.append(f"### {failed['name']}: cannot be used\n{failed['error']}")
    for c in report["concepts"]:
        size = c["size_range"]
        lines.append(f"### {c['name']}\n`{c['folder']}`\n")
        if c.get("clips"):
            lines.append(f"- clips: **{c['clips']}** of them, {c['clip_frames']} frames in all")
        lines.append(f"- images: **{c['images']}**; sizes from {size['min'][0]}×{size['min'][1]} to {size['max'][0]}×{size['max'][1]}")
        lines.append(f"- captions: {c['captions_found']} found, {c['captions_missing']['count']} missing" + _more(c["captions_missing"]))
        lines.append(f"- masks: {c['masks_found']} found, {c['masks_missing']['count']} missing" + _more(c["masks_missing"]))
        if c["transparent_images"]["count"]:
            lines.append(f"- transparency: {c['transparent_images']['count']} image(s) have transparent pixels; they train on a "
                         "white background" + _more(c["transparent_images"]))
        if "depth_maps_found" in c:
            lines.append(f"- depth maps: {c['depth_maps_found']} beside their images, {c['images'] - c['depth_maps_found']} estimated")
        if c["unreadable"]:
            lines.append(f"- **unreadable files ({len(c['unreadable'])})**, not trained:")
            lines += [f"  - `{u['name']}`: {u['reason']}" for u in c["unreadable"][:LIST_LIMIT]]
        lines.append("- buckets: " + ", ".join(f"{b}: {n}" for b, n in c["buckets"].items()))
        if c["never_trained"]:
            lines.append(f"- **never trained ({len(c['never_trained'])})**: their bucket cannot fill a batch of {report['batch_size']}:")
            lines += [f"  - `{n['name']}` ({', '.join(n['buckets'])})" for n in c["never_trained"][:LIST_LIMIT]]
    lines += [f"- warning: {w}" for w in report["warnings"][:50]]
    return "\n".join(lines)


def _more(listed: dict[str, Any]) -> str:
    if not listed["count"] or listed["count"] > 20:
        return ""
    return ": " + ", ".join(f"`{n}`" for n in listed["names"])


def run_job(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """Job "report": params `config` (our config dict), optional `resolution` and `batch_size`."""
    if not isinstance(params.get("config"), dict):
        raise JobError("config: the report needs the page's config (its concepts)")
    return build_report(params["config"], params.get("resolution") or None, params.get("batch_size") or None, job)
