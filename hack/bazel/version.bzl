"""Version stamp of Gantry's Kubernetes binaries under Bazel.

The values come from hack/version.sh (the workspace status command in
.bazelrc), as hack/build.sh stamps the Go build.
"""

def kube_version_x_defs(suffix = ""):
    """x_defs stamping k8s.io/component-base/version.

    Args:
      suffix: appended to gitVersion, e.g. ".patched" for kube-apiserver.

    Returns:
      A dict for go_binary's x_defs.
    """
    pkg = "k8s.io/component-base/version."
    return {
        pkg + "buildDate": "{STABLE_BUILD_DATE}",
        pkg + "gitCommit": "{STABLE_GIT_COMMIT}",
        pkg + "gitMajor": "{STABLE_GIT_MAJOR}",
        pkg + "gitMinor": "{STABLE_GIT_MINOR}",
        pkg + "gitTreeState": "{STABLE_GIT_TREE_STATE}",
        pkg + "gitVersion": "{STABLE_GIT_VERSION}" + suffix,
    }
