package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// BenchmarkDensity measures what one actor costs this machine. Each
// iteration creates a counter actor, answers one request (restore from
// the golden snapshot) and suspends it, as a platform holding mostly idle
// actors does. Reported: the rate of that cycle, disk per suspended actor
// (snapshots and store), the memory of a RUNNING actor (its sandbox and
// gofer processes, measured with all workers busy), and the capacities
// they imply for this machine's free disk and total memory.
//
// Memory is reported twice. RSS counts every page a process maps,
// including runsc's binary and libraries, which all sandboxes share; PSS
// (/proc/PID/smaps_rollup) charges a shared page to each of its users in
// proportion, so it is what one more actor adds. Capacity uses PSS; with
// only 4 actors sharing, it still overstates what the 300th would add.
func BenchmarkDensity(b *testing.B) {
	const workers = 4
	in := startUp(b, workers, "--demo")
	ctx := context.Background()
	n := 0
	start := time.Now()
	for b.Loop() {
		n++
		name := "dense-" + strconv.Itoa(n)
		if _, err := in.client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "default", Name: name, Template: "counter"}}); err != nil {
			b.Fatal(err)
		}
		if code, body, _, err := in.request(http.MethodGet, "default/"+name, "/", ""); err != nil || code != http.StatusOK {
			b.Fatalf("GET %s = %d %q %v", name, code, body, err)
		}
		if _, err := in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: name}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	snapBytes := dirBytes(b, filepath.Join(in.dataDir, "snapshots")) - goldenBytes(b, in)
	dbBytes := fileBytes(b, filepath.Join(in.dataDir, "ate.db"))
	perActorDisk := float64(snapBytes+dbBytes) / float64(n)

	// Fill every worker, then weigh the sandboxes.
	for i := 1; i <= min(workers, n); i++ {
		if code, _, _, err := in.request(http.MethodGet, fmt.Sprintf("default/dense-%d", i), "/", ""); err != nil || code != http.StatusOK {
			b.Fatalf("resume dense-%d: %d %v", i, code, err)
		}
	}
	running := min(workers, n)
	rss, pss := runscMemory(b)
	perRunning := float64(pss) / float64(running)

	var st syscall.Statfs_t
	if err := syscall.Statfs(in.dataDir, &st); err != nil {
		b.Fatal(err)
	}
	free := float64(st.Bavail) * float64(st.Bsize)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "actors/s")
	b.ReportMetric(perActorDisk/1024, "disk-KiB/suspended-actor")
	b.ReportMetric(float64(rss)/float64(running)/(1<<20), "RSS-MiB/running-actor")
	b.ReportMetric(perRunning/(1<<20), "PSS-MiB/running-actor")
	b.ReportMetric(free/perActorDisk, "suspended-actors-fitting-free-disk")
	b.ReportMetric(float64(memTotal(b))/perRunning, "running-actors-fitting-RAM")
	b.ReportMetric(0, "ns/op")
}

func dirBytes(b *testing.B, dir string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			total += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}

func fileBytes(b *testing.B, p string) int64 {
	info, err := os.Stat(p)
	if err != nil {
		b.Fatal(err)
	}
	return info.Size()
}

func goldenBytes(b *testing.B, in *installation) int64 {
	tpl, err := in.client.GetActorTemplate(context.Background(), &atev1.GetActorTemplateRequest{Atespace: "default", Name: "counter"})
	if err != nil {
		b.Fatal(err)
	}
	return dirBytes(b, filepath.Join(in.dataDir, "snapshots", tpl.GetStatus().GetGoldenSnapshot()))
}

// runscMemory sums the resident (RSS) and proportional (PSS) memory of
// every runsc sandbox and gofer process on the machine, in bytes.
func runscMemory(b *testing.B) (rss, pss int64) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !(strings.HasPrefix(string(cmd), "runsc-sandbox") || strings.HasPrefix(string(cmd), "runsc-gofer")) {
			continue
		}
		rollup, err := os.ReadFile(filepath.Join("/proc", p.Name(), "smaps_rollup"))
		if err != nil {
			continue // it exited meanwhile
		}
		for _, l := range strings.Split(string(rollup), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "Rss:":
				rss += kb << 10
			case "Pss:":
				pss += kb << 10
			}
		}
	}
	if pss == 0 {
		b.Fatal("found no runsc sandbox or gofer process to weigh")
	}
	return rss, pss
}

func memTotal(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no MemTotal in /proc/meminfo")
	return 0
}
