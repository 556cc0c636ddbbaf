package testkit

// Permutations calls f with every order of the n items 0..n-1 (n! calls): the tests that
// show an end state does not depend on the order events arrive in.
func Permutations(n int, f func(order []int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(int)
	rec = func(k int) {
		if k == n {
			f(append([]int(nil), p...))
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}
