package bench

import "os"

// fullBench reports whether benchmarks run at full size: `make bench`
// (hack/bench.sh) sets ATE_BENCH_SCALE=full. `make test` runs one
// iteration of every benchmark at a small size so no harness rots without
// spending minutes on it; a harness whose size is not its b.N (actor
// counts, state sizes) picks between the two with this.
func fullBench() bool { return os.Getenv("ATE_BENCH_SCALE") == "full" }
