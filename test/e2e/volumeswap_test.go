package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// swapLoop is what the attacking actor runs (python3 -c, argv[1] the host
// path it wants): a 96 MB file, so that the node's copy of the volume
// takes a while, then a stream of new files v000000, v000001, … of which
// each, 20 files later, is swapped for a symlink to the host path. So
// whenever the node lists the volume, the newest files it lists are about
// to become symlinks before it opens them. Each swap is a rename over the
// file, so no name ever vanishes (a copy that followed the symlink would
// go through without an error); the temporary names live in zz-tmp, which
// a copy in name order reaches last. Files are hard links of one, so the
// loop never holds a volume file open: a live checkpoint restores only if
// the files its process has open are in the volume copy.
const swapLoop = `
import os, sys, time
target = sys.argv[1]
os.makedirs('/data/zz-tmp', exist_ok=True)
with open('/data/0big', 'wb') as f:
    chunk = os.urandom(1 << 20)
    for _ in range(96):
        f.write(chunk)
with open('/data/zz-tmp/mine', 'w') as f:
    f.write('mine')
print('ready', flush=True)
for i in range(12000):
    os.link('/data/zz-tmp/mine', '/data/v%06d' % i)
    if i >= 20:
        os.symlink(target, '/data/zz-tmp/l')
        os.rename('/data/zz-tmp/l', '/data/v%06d' % (i - 20))
`

// scanForMarker (python3 -c, argv[1] the marker) prints how many regular
// files under /data hold the marker, and how many symlinks it found;
// it never follows a symlink, so it sees what the copy holds.
const scanForMarker = `
import os, sys
marker = sys.argv[1].encode()
hits = links = 0
for root, dirs, files in os.walk('/data'):
    for n in files + dirs:
        p = os.path.join(root, n)
        if os.path.islink(p):
            links += 1
        elif os.path.isfile(p) and marker in open(p, 'rb').read():
            hits += 1
print(hits, links)
`

// TestForkOfARunningActorNeverCopiesAHostFile: an actor swaps files of its
// volume for symlinks to a host file, one after another, while it is forked
// (ate create actor --from-actor of a RUNNING actor, which copies its
// volume as it runs). The node copies as root; the fork must hold none of
// the host file's bytes, and the host file is untouched.
func TestForkOfARunningActorNeverCopiesAHostFile(t *testing.T) {
	in := startUp(t, 3) // the source and two forks run at once
	in.createTemplate("test/e2e/testdata/notes-debug.yaml", "notes-debug")
	in.ate("create", "actor", "dbg-1", "--template", "notes-debug")
	in.ate("resume", "actor", "dbg-1")
	marker := "HOST-SECRET-" + rand.Text()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, line := in.ateStarted(nil, "exec", "actor", "dbg-1", "--", "python3", "-u", "-c", swapLoop, secret); line != "ready\n" {
		t.Fatalf("swap loop: first line %q", line)
	}

	// Two forks, as the attack needed; each copies the volume
	// while the loop swaps.
	for _, fork := range []string{"fork-1", "fork-2"} {
		if out, err := in.ateErr("create", "actor", fork, "--from-actor", "dbg-1"); err != nil {
			// A copy that gives up on an entry that keeps changing type
			// is a refusal, not a leak; anything else is a failure.
			if !strings.Contains(out, "changed type while being copied") {
				t.Fatalf("ate create actor %s --from-actor dbg-1: %v\n%s", fork, err, out)
			}
			t.Logf("%s refused: %s", fork, out)
			continue
		}
		in.ate("resume", "actor", fork)
		out, errOut, code := in.ateRun(nil, "exec", "actor", fork, "--", "python3", "-c", scanForMarker, marker)
		if code != 0 {
			t.Fatalf("scan of %s: code %d, stderr %q", fork, code, errOut)
		}
		var hits, links int
		if _, err := fmt.Sscan(out, &hits, &links); err != nil {
			t.Fatalf("scan of %s: %q: %v", fork, out, err)
		}
		t.Logf("%s: %d symlinks in its volume", fork, links)
		if hits != 0 {
			t.Errorf("%s holds the host file's bytes in %d of its volume's files", fork, hits)
		}
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != marker {
		t.Errorf("host file now %q, %v; want it untouched", got, err)
	}
}
