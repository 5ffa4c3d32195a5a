#!/bin/sh
# plot_gpu.sh CSV OUT.png - the cost of changing the producer set on the GPU
# (gpu-bench's CSV), per method: host time of the change and replay time
# after it, L = 32 and 128.  Needs gnuplot.
set -eu
csv=$1 out=$2
dat=$(mktemp)
trap 'rm -f "$dat"' EXIT
# method  change32 change128 replay32 replay128
awk -F, '$2 == "change" && ($4 == "host_us_change" || $4 == "us_per_replay_after") {
	k = $3; if (!(k in seen)) { seen[k] = 1; order[n++] = k }
	v[k, $4, $1] = $5 }
END { for (i = 0; i < n; i++) { k = order[i]
	printf "%s %s %s %s %s\n", k, v[k, "host_us_change", 32], v[k, "host_us_change", 128],
		v[k, "us_per_replay_after", 32], v[k, "us_per_replay_after", 128] } }' "$csv" >"$dat"
gnuplot <<GP
set terminal pngcairo size 1000,500 noenhanced font ",10"
set output "$out"
set multiplot layout 1,2 title "Changing half the producers of a chain of L layers (H200, medians of 21)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set xtics rotate by -25 nomirror
set key left top
set logscale y
set ylabel "host us to change the set (log)"
set title "host cost of the change"
plot "$dat" using 2:xtic(1) title "L = 32", "" using 3 title "L = 128"
unset logscale y
set ylabel "us per replay after the change"
set title "GPU replay time after it"
plot "$dat" using 4:xtic(1) title "L = 32", "" using 5 title "L = 128"
unset multiplot
GP
