// The pod sandbox's only process: our own pause, so the node needs no image from a registry.
module ocm-functions.invalid/tools/pause

go 1.25.0
