// Test-time source of SIG-Multicluster's Cluster Inventory API: the ClusterProfile and PlacementDecision
// CRDs our generated ones are compared with (test/api/crd-conformance.test.ts), and that the
// conformance tests install beside OCM's own programs. v0.1.3 is the newest release the Go proxy here
// serves, and the one OCM's main branch pins.
module ocm-functions.invalid/tools/inventory

go 1.25.0

require sigs.k8s.io/cluster-inventory-api v0.1.3
