// Command pause is the Pod sandbox ("pause") image of the cluster tests'
// containerd: the process that holds a Pod's namespaces open. No registry
// is reachable on the test machines, so registry.k8s.io/pause cannot be
// pulled; this does its job: it sleeps until SIGINT or SIGTERM, and as
// PID 1 of a Pod sharing its PID namespace it reaps orphaned children.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
