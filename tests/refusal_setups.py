"""The states a run is refused in, set up for a test: no network, a full disk, a corrupt checkpoint. Each one is
refused in one line whether the run goes through papermill (test_papermill) or `xsa_nb train` (test_cli)."""
import shutil
from pathlib import Path


def offline_env(tmp_path: Path) -> dict[str, str]:
    "Environment variables for a run whose downloads all fail (a proxy that refuses connections) into a cache of its own."
    proxy = "http://127.0.0.1:9"  # the discard port: nothing listens there
    return {"XSA_NB_CACHE": str(tmp_path / "cache"), "https_proxy": proxy, "HTTPS_PROXY": proxy,
            "no_proxy": "", "NO_PROXY": ""}


def full_disk_env(tmp_path: Path) -> dict[str, str]:
    """Environment variables for a run whose kernel finds the disk full: every atomic write (config.json, then the
    checkpoint) fails with ENOSPC, made so by a start-up file of an IPYTHONDIR of its own, run before the notebook
    imports xsa_nb's writers."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00_full_disk.py").write_text(
        "import errno as _errno\nimport xsa_nb.utils as _utils\n"
        "def _full(path, data):\n    raise OSError(_errno.ENOSPC, 'No space left on device')\n"
        "_utils.atomic_write_bytes = _full\n")
    return {"IPYTHONDIR": str(tmp_path / "ipython")}


def corrupt_copy(run: Path, dest: Path) -> Path:
    "A copy `dest` of trained run `run`, unfinished (no summary.json, so it resumes) and with truncated weights."
    shutil.copytree(run, dest)
    (dest / "summary.json").unlink()
    weights = dest / "checkpoint" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return dest
