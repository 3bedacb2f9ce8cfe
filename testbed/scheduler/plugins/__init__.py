"""The default score plugins, one module each as upstream has one package each
(kubernetes/kubernetes ``pkg/scheduler/framework/plugins/<name>/``): the interface in
:mod:`.base`, the default weights and extension points in :mod:`.registry`.
"""
