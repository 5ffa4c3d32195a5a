# example.awk - print the ```c block of a markdown page that includes
# toggle_sim.h and has a main(): the page's complete simulator example, from
# its first line to its closing fence, exactly as written.
/^```c$/ { on = 1; buf = ""; next }
on && /^```/ {
	if (buf ~ /#include "toggle_sim.h"/ && buf ~ /int main\(/) { printf "%s", buf; exit }
	on = 0; next
}
on { buf = buf $0 "\n" }
