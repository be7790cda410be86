"""The bash sandbox: bubblewrap, the mount plan, the id-mapped namespace, the seccomp filter,
and each call's memory and disk ceilings. Imports the layers below it."""
