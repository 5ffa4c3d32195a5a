# plot_apply.gp - host cost of applying a change of k hooks on a graph of n
# producers (bench_host apply).  Input: whitespace table "n k calls ns ns_per".
# gnuplot -e "in='apply.dat'; out='docs/bench_apply.png'" bench/plot_apply.gp
set terminal pngcairo size 900,560 noenhanced font ",11"
set output out
set title "libtoggle: host time of the replay that applies a change of k hooks (simulated driver)"
set xlabel "k: hooks changed"
set ylabel "ns per launch (median)"
set logscale xy
set key left top
set grid
plot for [n in "32 96 512 4096"] in using ($1 == n+0 ? $2 : 1/0):4 with linespoints title "n = ".n." producers"
