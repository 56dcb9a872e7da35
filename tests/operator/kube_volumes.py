"""Who may write a mounted claim, as the kubelet and the storage decide it (``FakeKube``'s kubelet).

- fsGroup: kubernetes ``pkg/volume/csi/csi_mounter.go`` (``supportsFSGroup``): under a CSI driver's
  default ``fsGroupPolicy`` (ReadWriteOnceWithFSType) the kubelet gives a volume to the pod's fsGroup
  only when its PersistentVolume's access modes include ReadWriteOnce and it is not mounted read-only;
  a ReadWriteMany volume (NFS, EFS, Filestore, CephFS) keeps the owner its storage gave its root
  directory, root's (``FakeKube.volume_owner`` says otherwise, e.g. an EFS access point's UID).
- A ReadOnlyMany claim, or a mount marked readOnly, is a read-only filesystem: any write fails (EROFS).
- Containers run in order, init containers first. One running as root with CAP_CHOWN that mounts the
  claim read-write takes the role of the operator's cache-owner: it gives the claim's root to the
  ``UID:GID`` of its last argument (the contract of constants.CACHE_OWNER_COMMAND).
- A container writes the claim where it mounts it read-write, or where its environment points a
  writer into it: the compiled-kernel caches (TRITON_CACHE_DIR, FLASHINFER_WORKSPACE_BASE) or the Hub
  cache (HF_HOME, unless HF_HUB_OFFLINE=1). It may where it is the owner, or the volume is its fsGroup's.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
SINGLE_NODE = ("ReadWriteOnce", "ReadWriteOncePod")
WRITER_ENV = ("TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")


def _mount_of(container: Obj, volume: str) -> Obj | None:
    return next((m for m in container.get("volumeMounts") or [] if m["name"] == volume), None)


def _writes(container: Obj, mount: Obj, read_only: bool) -> bool:
    if not read_only:
        return True
    env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
    under = [env.get(name, "") for name in WRITER_ENV] + ([env.get("HF_HOME", "")] if env.get("HF_HUB_OFFLINE") != "1" else [])
    return any(path.startswith(mount["mountPath"]) for path in under if path)


def write_error(pod_spec: Obj, claims: dict[str, Obj], owners: dict[str, tuple[int, int]]) -> tuple[str, str] | None:
    """(container, its error) for the first container that cannot write a claim it writes, else None.
    ``claims``: claim name -> PVC; ``owners``: claim name -> (uid, gid) of its root, updated by a chown."""
    pod_security = pod_spec.get("securityContext") or {}
    fs_group = pod_security.get("fsGroup")
    for volume in pod_spec.get("volumes") or []:
        source = volume.get("persistentVolumeClaim")
        if not source or source["claimName"] not in claims:
            continue
        claim = source["claimName"]
        modes = set(claims[claim]["spec"].get("accessModes") or [])
        read_only_fs = modes == {"ReadOnlyMany"} or bool(source.get("readOnly"))
        grouped = fs_group is not None and bool(modes & set(SINGLE_NODE)) and not read_only_fs
        for container in [*(pod_spec.get("initContainers") or []), *pod_spec.get("containers", [])]:
            mount = _mount_of(container, volume["name"])
            if mount is None:
                continue
            security = container.get("securityContext") or {}
            uid = security.get("runAsUser", pod_security.get("runAsUser", 0))
            read_only = read_only_fs or bool(mount.get("readOnly"))
            if uid == 0 and "CHOWN" in (security.get("capabilities") or {}).get("add", []) and not read_only:
                owner_uid, owner_gid = map(int, [*container["command"], *container.get("args", [])][-1].split(":"))
                owners[claim] = (owner_uid, owner_gid)
                continue
            if not _writes(container, mount, read_only):
                continue
            path = mount["mountPath"]
            if read_only:
                return container["name"], f"OSError: [Errno 30] Read-only file system: '{path}'"
            owner_uid, _ = owners.get(claim, (0, 0))
            if uid != owner_uid and uid != 0 and not grouped:
                return container["name"], f"PermissionError: [Errno 13] Permission denied: '{path}'"
    return None
