"""streamparse projects on real Apache Storm: the topology jar, submission, chaos.

:func:`build_jar` writes the jar ``sparse submit`` uploads; :mod:`.submit`
submits a topology file to Nimbus the way ``sparse submit`` does;
:mod:`.workers` finds the worker JVMs and Python task processes of a topology
on this machine; :mod:`.run` drives ``sr3 run --engine apache-storm``;
:mod:`.hook` gives a topology of streamparse's own ``sparse submit`` the hidden
generation field (the project's ``pre_submit``).
"""

from storm_bridge.sparse.package import RESOURCES, build_jar, resource_files

__all__ = ["RESOURCES", "build_jar", "resource_files"]
