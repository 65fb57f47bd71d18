"""Simulated plan trials: how much step time each keep rule loses against the best candidate.

Five candidates (the dynamic program's plan first, then four others) are timed V visits each, every visit one
step drawn from a normal distribution around the candidate's true step with the given relative noise. A rule
names the candidate to keep; its loss is the kept candidate's true step over the best one's, minus 1, averaged
over many trials. The rules:

  range     the fastest mean replaces the first if it beats it by the margin and by half the sum of the two
            candidates' ranges (the runtime's rule before the standard error)
  stderr    the same with the standard error of the difference of the two means, the variance pooled over
            every candidate's visits about its own mean (src/core/plan_trials.cc, chooseTrial)
  margin    the fastest mean replaces the first if it beats it by the margin alone
  fastest   the fastest mean, by any gain (the dense fusion threshold trials' rule)
  run-off   stderr, and where the fastest beat the first by the margin but not by the standard error, 4 more
            visits of the two and stderr on both trials' visits of the two (plan_trials.h, chooseTrial's run_off);
            "run-offs" is how often that happened (each costs 16 steps)

The scenarios are relative true steps of the five candidates. "first 8 % slower" is the ResNet-50 1 Gbit/s
rho 0.001 16-rank cell of the sweep (bench/cluster), where the plan of 4 buckets ran 7.8 % slower than 2 buckets
in whole-process periods without a per-step barrier.

    /usr/bin/python3 bench/plan/trial_rule_sim.py [--trials N] [--seed S]
"""

import argparse
import math
import random
import statistics

MARGIN = 0.03

SCENARIOS = {
    "first 8 % slower": [1.08, 1.00, 1.01, 1.05, 1.15],
    "first 4 % slower": [1.04, 1.00, 1.03, 1.06, 1.12],
    "all equal": [1.00, 1.00, 1.00, 1.00, 1.00],
    "first best by 5 %": [1.00, 1.05, 1.06, 1.08, 1.15],
}


def fastest(samples):
    means = [statistics.mean(s) for s in samples]
    return min(range(len(samples)), key=lambda i: means[i]), means


def keep_if(samples, noise):
    best, means = fastest(samples)
    if best == 0:
        return 0
    gain = means[0] - means[best]
    return best if gain > MARGIN * means[0] and gain > noise(samples, means, best) else 0


def range_noise(samples, means, best):
    return 0.5 * ((max(samples[0]) - min(samples[0])) + (max(samples[best]) - min(samples[best])))


def stderr_noise(samples, means, best):
    ss = sum((x - means[i]) ** 2 for i, s in enumerate(samples) for x in s)
    df = sum(len(s) - 1 for s in samples)
    sd = math.sqrt(ss / df) if df else 0.0
    return sd * math.sqrt(1 / len(samples[0]) + 1 / len(samples[best]))


RUN_OFF_VISITS = 4


def run_off(samples, draw, counter):
    kept = keep_if(samples, stderr_noise)
    if kept != 0:
        return kept
    best, means = fastest(samples)
    if best == 0 or means[0] - means[best] <= MARGIN * means[0]:
        return 0
    counter[0] += 1
    two = [samples[0] + draw(0, RUN_OFF_VISITS), samples[best] + draw(best, RUN_OFF_VISITS)]
    return best if keep_if(two, stderr_noise) == 1 else 0


RULES = {
    "range": lambda s, d, c: keep_if(s, range_noise),
    "stderr": lambda s, d, c: keep_if(s, stderr_noise),
    "margin": lambda s, d, c: keep_if(s, lambda *_: 0.0),
    "fastest": lambda s, d, c: fastest(s)[0],
    "run-off": run_off,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    print("expected loss against the best candidate, % of its step")
    print(f"{'noise':>5} {'visits':>6}  {'scenario':18}" + "".join(f"{r:>9}" for r in RULES) + "  run-offs")
    for noise in (0.07, 0.04):
        for visits in (2, 4):
            for name, truth in SCENARIOS.items():
                loss = dict.fromkeys(RULES, 0.0)
                runs = [0]
                for _ in range(args.trials):
                    samples = [[rng.gauss(t, noise * t) for _ in range(visits)] for t in truth]
                    draw = lambda i, n: [rng.gauss(truth[i], noise * truth[i]) for _ in range(n)]
                    for r, rule in RULES.items():
                        loss[r] += truth[rule(samples, draw, runs)] / min(truth) - 1
                print(f"{noise:5.2f} {visits:6d}  {name:18}" +
                      "".join(f"{100 * loss[r] / args.trials:8.2f}%" for r in RULES) +
                      f"  {100 * runs[0] / args.trials:7.1f}%")


if __name__ == "__main__":
    main()
