"""TinyStories, version 1 or 2, by its files: never the two mixed.

The dataset repository (roneneldan/TinyStories) holds both versions as .txt files, stories
separated by <|endoftext|> lines, beside a parquet copy and archives:

    v1  TinyStories-train.txt, TinyStories-valid.txt                (GPT-3.5 and GPT-4 stories)
    v2  TinyStoriesV2-GPT4-train.txt, TinyStoriesV2-GPT4-valid.txt  (GPT-4 stories only)

A local copy (`data.local_path`) is a directory holding the chosen version's two files (a clone of
the repository, or just those files); only they are read. A copy whose files do not say their
version (a `save_to_disk` directory, parquet or .jsonl files) is refused. Without a local copy the
two files are downloaded from the Hub (to its cache).
"""

from __future__ import annotations

from pathlib import Path

from .hf_datasets import hub_file

TINYSTORIES = "roneneldan/TinyStories"
TINYSTORIES_VERSIONS = ("v1", "v2")
TINYSTORIES_FILES = {  # version -> split -> file of the dataset repository
    "v1": {"train": "TinyStories-train.txt", "validation": "TinyStories-valid.txt"},
    "v2": {"train": "TinyStoriesV2-GPT4-train.txt", "validation": "TinyStoriesV2-GPT4-valid.txt"},
}


def _download_recipe(version: str) -> str:
    names = list(TINYSTORIES_FILES[version].values())
    return (
        'python -c "import huggingface_hub as h; h.snapshot_download('
        f"'{TINYSTORIES}', repo_type='dataset', allow_patterns={names}, local_dir='PATH')\""
    )


def _find(root: Path, name: str) -> list[Path]:
    return sorted(p for p in root.rglob(name) if p.is_file())


def tinystories_files(
    version: str, local_path: str | None = None, key: str = "data.local_path"
) -> dict[str, Path]:
    """{"train": file, "validation": file} of TinyStories `version` ("v1" or "v2"): from the
    directory `local_path` if given (only that version's files; an error if it lacks them or
    holds them twice), else from the Hub (DataUnavailableError, saying how to make a local copy,
    if it cannot be reached)."""
    if version not in TINYSTORIES_VERSIONS:
        raise ValueError(f"unknown TinyStories version {version!r}; choose one of v1, v2")
    wanted = TINYSTORIES_FILES[version]
    if not local_path:
        recipe = _download_recipe(version)
        return {split: hub_file(TINYSTORIES, name, recipe, key) for split, name in wanted.items()}
    root = Path(local_path)
    if not root.exists():
        raise FileNotFoundError(f"{key} {local_path} does not exist")
    expected = f"{wanted['train']} and {wanted['validation']}"
    if not root.is_dir():
        raise ValueError(
            f"{key} {local_path}: TinyStories needs the directory holding {expected} "
            f"(data.tinystories: {version}), not a file"
        )
    found = {split: _find(root, name) for split, name in wanted.items()}
    if all(len(paths) == 1 for paths in found.values()):
        return {split: paths[0] for split, paths in found.items()}
    twice = [str(p) for paths in found.values() if len(paths) > 1 for p in paths]
    if twice:
        raise ValueError(f"{key} {local_path}: holds TinyStories {version} files twice: {twice}")
    other = "v1" if version == "v2" else "v2"
    theirs = [n for n in TINYSTORIES_FILES[other].values() if _find(root, n)]
    missing = [wanted[split] for split, paths in found.items() if not paths]
    if theirs:
        raise ValueError(
            f"{key} {local_path}: holds TinyStories {other} ({', '.join(theirs)}) but not "
            f"{version}'s {', '.join(missing)}; set data.tinystories: {other} to use {other}, "
            f"or add the {version} files"
        )
    if len(missing) == 1:
        raise ValueError(f"{key} {local_path}: TinyStories {version} lacks {missing[0]}")
    raise ValueError(
        f"{key} {local_path}: cannot tell which TinyStories version it holds: expected the "
        f"dataset repository's {expected} (data.tinystories: {version}); a save_to_disk copy or "
        f"parquet/.jsonl files do not name their version. Make a copy with:  "
        f"{_download_recipe(version)}"
    )
