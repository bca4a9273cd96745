"""Shared fixtures for the black-box tests: where the binaries and models are."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    return ROOT / os.environ.get("CELLM_BUILD_DIR", "build")


@pytest.fixture(scope="session")
def cellm_bin() -> Path:
    path = build_dir() / "bin" / "cellm"
    if not path.exists():
        pytest.fail(f"{path} is missing: build first (scripts/bootstrap)")
    return path


def model(name: str) -> Path:
    path = Path(os.environ.get("CELLM_MODELS_DIR", ROOT / "models")) / name
    if not path.exists():
        if os.environ.get("CELLM_REQUIRE_MODELS", "0") not in ("", "0"):
            pytest.fail(f"model {path} is missing (CI requires it)")
        pytest.skip(f"model {path} is missing; run scripts/fetch-models")
    return path


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return model("SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def gemma3() -> Path:
    return model("gemma-3-270m-q4_k_m.gguf")
