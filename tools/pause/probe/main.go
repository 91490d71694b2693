// probe is the test image of a node: it proves a container ran by leaving a line in its log and in
// its termination message (which kubelet copies into the pod's status), and, when the pod has a
// service-account token, that the pod reaches the API server at KUBERNETES_SERVICE_HOST and _PORT
// with that token, trusting the cluster's CA, by listing namespaces (as client-go's in-cluster
// configuration would). Standard library only, so the binary is static and the image has no
// other file.
//
// Its arguments choose what else it does, for tests of a node's Services and cluster DNS:
//
//	probe                      the above
//	probe api <host>           resolve host through the pod's resolver (cluster DNS), then list
//	                           namespaces at https://<host>:443 with the pod's token
//	probe serve <port>         answer every HTTP request with one line naming the pod, until killed
//	probe get <url>            fetch url and report its body
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
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
	var more []string
	var err error
	switch args := os.Args[1:]; {
	case len(args) == 0:
		more, err = defaultProbe()
	case len(args) == 2 && args[0] == "api":
		more, err = apiByName(args[1])
	case len(args) == 2 && args[0] == "serve":
		serve(args[1]) // returns only on failure
	case len(args) == 2 && args[0] == "get":
		more, err = get(args[1])
	default:
		err = fmt.Errorf("unknown arguments %q", args)
	}
	lines = append(lines, more...)
	code := 0
	if err != nil {
		lines = append(lines, "probe: "+err.Error())
		code = 1
	}
	finish(lines, code)
}

// Only a pod with a service-account token calls the API server (kubelet sets the address in every
// pod, token or not).
func defaultProbe() ([]string, error) {
	if _, err := os.Stat(serviceAccountDir + "/token"); err != nil {
		return nil, nil
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	names, err := listNamespaces(net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	return []string{"probe: namespaces " + strings.Join(names, ",")}, nil
}

// The API server by a DNS name: the address comes from the resolver kubelet configured (cluster DNS),
// and TLS checks the certificate against that name.
func apiByName(host string) ([]string, error) {
	addrs, err := net.LookupHost(host)
	if err != nil {
		return nil, err
	}
	sort.Strings(addrs)
	lines := []string{"probe: " + host + " is " + strings.Join(addrs, ",")}
	names, err := listNamespaces(net.JoinHostPort(host, "443"))
	if err != nil {
		return lines, fmt.Errorf("list namespaces: %w", err)
	}
	return append(lines, "probe: namespaces "+strings.Join(names, ",")), nil
}

func serve(port string) {
	name, _ := os.Hostname()
	fmt.Println("probe: serving on port " + port)
	err := http.ListenAndServe(":"+port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "probe: hello from %s\n", name)
	}))
	finish([]string{"probe: serve: " + err.Error()}, 1)
}

// Tries up to 30 times, a second apart: a Service's new endpoint reaches kube-proxy's rules a moment
// after the API has it. The line says how many tries it took.
func get(url string) ([]string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	var res *http.Response
	var err error
	tries := 0
	for tries < 30 {
		tries++
		if res, err = client.Get(url); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return nil, fmt.Errorf("%d tries: %w", tries, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return []string{fmt.Sprintf("probe: GET %s (try %d): %s", url, tries, strings.TrimSpace(string(body)))}, nil
}

func finish(lines []string, code int) {
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
