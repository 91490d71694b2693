// probe is the test image of a node: it proves a container ran by leaving a line in its log and in
// its termination message (which kubelet copies into the pod's status), and, when the pod has a
// service-account token, that the pod reaches the API server at KUBERNETES_SERVICE_HOST and _PORT
// with that token, trusting the cluster's CA, by listing namespaces (as client-go's in-cluster
// configuration would). Standard library only, so the binary is static and the image has no
// other file.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	lines := []string{"probe: ran as uid " + fmt.Sprint(os.Getuid())}
	code := 0
	// Only a pod with a service-account token calls the API server (kubelet sets the address in
	// every pod, token or not).
	if _, err := os.Stat(serviceAccountDir + "/token"); err == nil {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		names, err := listNamespaces(net.JoinHostPort(host, port))
		if err != nil {
			lines = append(lines, "probe: list namespaces: "+err.Error())
			code = 1
		} else {
			lines = append(lines, "probe: namespaces "+strings.Join(names, ","))
		}
	}
	text := strings.Join(lines, "\n") + "\n"
	fmt.Print(text)
	// kubelet reads this file into status.containerStatuses[].state.terminated.message.
	_ = os.WriteFile("/dev/termination-log", []byte(text), 0o644)
	os.Exit(code)
}

// listNamespaces calls the API server as the pod's service account, trusting only the cluster's CA
// from the projected volume, as client-go's in-cluster configuration does.
func listNamespaces(address string) ([]string, error) {
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		return nil, err
	}
	caPem, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPem) {
		return nil, fmt.Errorf("no certificate in %s/ca.crt", serviceAccountDir)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	req, err := http.NewRequest("GET", "https://"+address+"/api/v1/namespaces", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", res.Status)
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, item := range list.Items {
		names = append(names, item.Metadata.Name)
	}
	sort.Strings(names)
	return names, nil
}
