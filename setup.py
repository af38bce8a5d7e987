"""Package metadata comes from settings.ini (the nbdev 2.4 convention)."""
from configparser import ConfigParser

import setuptools

cfg = ConfigParser(delimiters=["="])
cfg.read("settings.ini", encoding="utf-8")
cfg = cfg["DEFAULT"]

setuptools.setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    description=cfg["description"],
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    author=cfg["author"],
    license="Apache-2.0",
    url=cfg["git_url"],
    python_requires=">=" + cfg["min_python"],
    packages=setuptools.find_packages(include=[cfg["lib_path"], cfg["lib_path"] + ".*"]),
    include_package_data=True,
    install_requires=cfg["requirements"].split(),
    extras_require={"dev": cfg["dev_requirements"].split(), "wandb": cfg["wandb_requirements"].split(),
                    "slurm": cfg["slurm_requirements"].split()},
    entry_points={
        "console_scripts": cfg["console_scripts"].split(),
        "nbdev": [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"],
    },
    zip_safe=False,
)
