// The CRDs the tests install beside Argo Rollouts' (Gateway API's, Istio's), taken from their Go
// modules at test time (build.sh --crd-module-dir): nothing of these modules is built, and
// nothing of them is committed but these pins.
module flotilla.invalid/tools/k8s-testenv/crds

go 1.24.0

require (
	istio.io/api v1.32.0 // indirect
	sigs.k8s.io/gateway-api v1.4.1 // indirect
)
