package bench

import "time"

// The arithmetic of goal 4 of issue 27: what the stack's CPU allows past capacity,
// from what each phase measured. At capacity the stack spends all the CPU it has on
// answers, so that CPU is capacity × the CPU of one answer; past capacity the same CPU
// must answer and refuse. These figures say whether a goal was missed by the code or is
// out of reach of the machine: a refusal that costs a third of an answer leaves at 2× too
// little CPU for 90% of capacity, however the excess is chosen.

// stackCPU is the CPU the stack used during p: every process but the bench's own (the load
// generator, the embedded NATS server and the floor's handler).
func (p *phase) stackCPU() time.Duration { return p.cpu.Total() - p.cpu["bench"] }

// delivered is how many requests per second of p reached the stack: the arrivals the
// generator managed, which fall short of the offered rate when it lags.
func (p *phase) delivered() float64 {
	if p.duration <= 0 {
		return 0
	}
	return float64(len(p.outcomes)) / p.duration.Seconds()
}

// cpuPerAnswer is the stack's CPU per accepted request of p (0 when none was accepted).
func (p *phase) cpuPerAnswer() time.Duration {
	if p.acceptedCount == 0 {
		return 0
	}
	return p.stackCPU() / time.Duration(p.acceptedCount)
}

// cpuPerRefusal estimates the stack's CPU per refused request of p: its CPU beyond its
// answers at perAnswer each, over its refusals and other errors (0 when it had none).
// Answers past capacity ride in larger batches and cost if anything less than perAnswer,
// so the estimate errs low, and goodputBound with it errs high.
func (p *phase) cpuPerRefusal(perAnswer time.Duration) time.Duration {
	refused := len(p.refusals) + p.errors
	if refused == 0 {
		return 0
	}
	return max(0, p.stackCPU()-time.Duration(p.acceptedCount)*perAnswer) / time.Duration(refused)
}

// cores is how many cores' worth of CPU the process named by name used during p on
// average ("" for the whole stack, stackCPU).
func (p *phase) cores(name string) float64 {
	if p.duration <= 0 {
		return 0
	}
	used := p.stackCPU()
	if name != "" {
		used = p.cpu[name]
	}
	return used.Seconds() / p.duration.Seconds()
}

// goodputBound is the largest share of its capacity the stack can answer when offered k×
// its capacity, if an answer costs perAnswer and a refusal perRefusal, and it has cpu
// times the CPU it answers its capacity with (1: the same; less when the load generator,
// sending k× the requests on the same machine, takes more of it):
// g × perAnswer + (k − g) × perRefusal ≤ cpu × perAnswer.
func goodputBound(perAnswer, perRefusal time.Duration, k, cpu float64) float64 {
	a, r := perAnswer.Seconds(), perRefusal.Seconds()
	if a <= 0 {
		return 0
	}
	if r >= a {
		return min(1, cpu/k) // refusing costs as much as answering: answer what comes first
	}
	return max(0, min(1, (cpu*a-k*r)/(a-r)))
}

// refusalCeiling is the most a refusal may cost for the stack to answer share of its
// capacity when offered k× it (goodputBound's inequality solved for the refusal).
func refusalCeiling(perAnswer time.Duration, k, share float64) time.Duration {
	if k <= share {
		return perAnswer
	}
	return time.Duration((1 - share) * float64(perAnswer) / (k - share))
}
