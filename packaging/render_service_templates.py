"""Regenerate the service templates in packaging/ from localrun.cli.autostart (the code `localrun service
install` uses), with placeholders instead of this machine's paths:

    @PYTHON@   the interpreter that has localrun installed (pythonw.exe on Windows)
    @LOG_DIR@  the platformdirs user log dir (`localrun info` prints it under settings)
    @HOME@     the user's home directory

Run from the repository root: ``.venv/bin/python packaging/render_service_templates.py``.
tests/integration/test_autostart.py fails when the templates and the code disagree.
"""

from pathlib import Path

from localrun.cli.autostart import ServiceKind, ServiceSpec, render

PLACEHOLDERS = ServiceSpec(python="@PYTHON@", log_dir=Path("@LOG_DIR@"), working_dir=Path("@HOME@"))
TARGETS = {
    ServiceKind.SYSTEMD: "packaging/systemd/localrun.service",
    ServiceKind.LAUNCHD: "packaging/launchd/io.localrun.serve.plist",
    ServiceKind.WINDOWS: "packaging/windows/localrun-serve.cmd",
}

for kind, target in TARGETS.items():
    Path(target).write_bytes(render(kind, PLACEHOLDERS))
    print(f"wrote {target}")
