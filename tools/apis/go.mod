// Test-time source of the third-party APIs we serve beside OCM's: SIG-Multicluster's Cluster Inventory
// API (the ClusterProfile and PlacementDecision CRDs) and OCM's managed-serviceaccount add-on (the
// ManagedServiceAccount CRD). test/api/crd-conformance.test.ts compares our generated CRDs with theirs,
// and the conformance tests install them beside OCM's own programs. Each is the newest release the Go
// proxy here serves: cluster-inventory-api v0.1.3 (the one OCM's main branch pins), managed-serviceaccount
// v0.10.0 (the first with its ClusterProfile credentials plugin).
module ocm-functions.invalid/tools/apis

go 1.25.0

require (
	open-cluster-management.io/managed-serviceaccount v0.10.0
	sigs.k8s.io/cluster-inventory-api v0.1.3
)
