// Package fairness holds the fairness measure that the shared-capacity
// simulation tests and the scenario benchmark tool both report.
package fairness

// Jain returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when every x
// is equal, 1/n when one takes everything. No allocation at all counts as
// fair, and so does an empty xs.
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}
