// A consumer of the cluster inventory, as MultiKueue or Argo CD is one: it lists the ClusterProfiles in
// one namespace of the hub, builds a client for each with the Cluster Inventory API's own access helper
// (pkg/access: the profile's access provider plus an exec credential plugin named in a provider file),
// and lists the Namespaces of every cluster through it. It prints one line per profile, "<name> <n>"
// with the number of namespaces it saw, or "<name> error: <why>", and exits 1 if any profile failed or
// none was found. Used by test/inventory-consumer.test.ts; never shipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
)

func main() {
	hubKubeconfig := flag.String("hub-kubeconfig", "", "the consumer's kubeconfig for the hub")
	namespace := flag.String("namespace", "", "the namespace whose ClusterProfiles are read")
	providerFile := access.SetupProviderFileFlag()
	flag.Parse()
	if *hubKubeconfig == "" || *namespace == "" {
		fmt.Fprintln(os.Stderr, "--hub-kubeconfig and --namespace are required")
		os.Exit(2)
	}
	if err := run(*hubKubeconfig, *namespace, *providerFile); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(hubKubeconfig, namespace, providerFile string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hubConfig, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return fmt.Errorf("hub kubeconfig: %w", err)
	}
	profiles, err := versioned.NewForConfigOrDie(hubConfig).ApisV1alpha1().ClusterProfiles(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ClusterProfiles in %s: %w", namespace, err)
	}
	if len(profiles.Items) == 0 {
		return fmt.Errorf("no ClusterProfiles in %s", namespace)
	}
	providers, err := access.NewFromFile(providerFile)
	if err != nil {
		return err
	}
	sort.Slice(profiles.Items, func(i, j int) bool { return profiles.Items[i].Name < profiles.Items[j].Name })
	failed := 0
	for i := range profiles.Items {
		p := &profiles.Items[i]
		count, err := namespacesOf(ctx, providers, p)
		if err != nil {
			failed++
			fmt.Printf("%s error: %v\n", p.Name, err)
			continue
		}
		fmt.Printf("%s %d\n", p.Name, count)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d ClusterProfiles could not be reached", failed, len(profiles.Items))
	}
	return nil
}

// Through the profile's access provider and the plugin the provider file names for it.
func namespacesOf(ctx context.Context, providers *access.Config, p *v1alpha1.ClusterProfile) (int, error) {
	config, err := providers.BuildConfigFromCP(p)
	if err != nil {
		return 0, err
	}
	config.Timeout = 15 * time.Second
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return 0, err
	}
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	return len(list.Items), nil
}
