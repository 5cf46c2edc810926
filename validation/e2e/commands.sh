# Commands that produced validation/e2e/*.json and figures/e2e/*.png (2026-11-29, shared 2-core CPU box).
# Checkpoints: speccheck/data/digits_{edm,flow}.pt (see speccheck/data/README.md).
S="python -m speccheck.cli e2e --threads 1 --figures figures/e2e"
# exactness at n = 2000 (paper EDM cell (2,3), eps 0.3; SD3-style K = 4, L = 2, eps 0.8, 50 steps, shift 3)
$S --model digits-edm --verifier rmc dgrs rass --K 2 --L 3 --eps 0.3 --samples 2000 --json validation/e2e/digits-edm_exact_n2000.json
$S --model digits-edm --verifier mcrs --K 2 --L 3 --eps 0.3 --samples 2000 --json validation/e2e/digits-edm_mcrs_exact_n2000.json
for v in rmc dgrs rass; do
$S --model digits-flow --verifier $v --K 4 --L 2 --eps 0.8 --steps 50 --shift 3 --samples 2000 --json validation/e2e/digits-flow_sd3style_exact_n2000_$v.json
done
$S --model digits-flow --guidance 3 --verifier dgrs --K 4 --L 2 --eps 0.8 --steps 50 --shift 3 --samples 500 --json validation/e2e/digits-flow_cfg3_sd3style_n500.json
# broken samplers (validation/sampler_mutants.py) on digits-edm, n = 2000
$S --model digits-edm --verifier dgrs --K 2 --L 3 --eps 0.3 --samples 2000 --sampler-mutant wrong-noise-index --json validation/e2e/digits-edm_mutant_n2000.json
$S --model digits-edm --verifier dgrs --K 2 --L 3 --eps 0.3 --samples 2000 --no-innovation --sampler-mutant root-target-mean --json validation/e2e/digits-edm_mutant2_n2000.json
# paper EDM grid: (K,L) in {(2,3),(2,5),(3,4),(4,4)}, rmc on the chain with the same budget B
$S --model digits-edm --verifier rmc dgrs rass --K 2 --L 3 5 --eps 0.3 --samples 300 --json validation/e2e/digits-edm_grid_K2_eps0.3.json
$S --model digits-edm --verifier rmc dgrs rass --K 3 4 --L 4 --eps 0.3 --samples 300 --json validation/e2e/digits-edm_grid_K34_eps0.3.json
for eps in 0.1 0.6; do
$S --model digits-edm --verifier rmc dgrs rass --K 2 --L 3 5 --eps $eps --samples 200 --no-two-sample --json validation/e2e/digits-edm_grid_K2_eps$eps.json
$S --model digits-edm --verifier rmc dgrs rass --K 3 4 --L 4 --eps $eps --samples 200 --no-two-sample --json validation/e2e/digits-edm_grid_K34_eps$eps.json
done
# drafting variants (freeze) on digits-edm
for fr in velocity drift; do
$S --model digits-edm --verifier dgrs --K 2 --L 3 --eps 0.3 --samples 200 --no-two-sample --freeze $fr --json validation/e2e/digits-edm_freeze_$fr.json
done
# SD3-style sweep (L = 2, K = 2..7; K = 4 above) and the flow model at the (2,3) EDM cell
$S --model digits-flow --verifier dgrs rass rmc --K 2 3 5 6 7 --L 2 --eps 0.8 --steps 50 --shift 3 --samples 200 --no-two-sample --json validation/e2e/digits-flow_sd3style_grid.json
$S --model digits-flow --verifier dgrs rass rmc --K 2 --L 3 --eps 0.3 --samples 200 --no-two-sample --json validation/e2e/digits-flow_grid_K2L3_eps0.3.json
# wall-clock
python benchmarks/bench_e2e.py --threads 1 --reps 5 --max-rows 4096 --batches 1 16 > validation/e2e/bench_e2e_cpu.txt
