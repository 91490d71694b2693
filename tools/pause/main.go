// pause holds a pod's namespaces open. It runs as PID 1 of the sandbox, where the kernel drops any
// signal that has no handler, so it must catch SIGTERM/SIGINT itself to stop when kubelet asks,
// and, being the namespace's init, it reaps every orphan re-parented to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (ocm-functions)")
		return
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", s)
		os.Exit(0)
	}
}

// reap collects every exited child without blocking; one SIGCHLD may stand for several exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
