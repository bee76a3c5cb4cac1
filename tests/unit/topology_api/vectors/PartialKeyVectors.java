// Prints the reference vectors of tests/unit/topology_api/test_partial_key.py from
// Storm 2.8.3 itself: java -cp ".cache/storm-2.8.3/lib/*" PartialKeyVectors.java < in
// Lines of input: "R|seed|bound" (five Random.nextInt draws) or
// "tasks|v1|v2|..." (the task PartialKeyGrouping() picks for each first value;
// prefixes i: Integer, L: Long, D: Double, B: Boolean, else a String).
import java.io.*;
import java.util.*;
import org.apache.storm.grouping.PartialKeyGrouping;
public class PartialKeyVectors {
    static Object parse(String s) {
        if (s.startsWith("i:")) return Integer.valueOf(s.substring(2));
        if (s.startsWith("L:")) return Long.valueOf(s.substring(2));
        if (s.startsWith("D:")) return Double.valueOf(s.substring(2));
        if (s.startsWith("B:")) return Boolean.valueOf(s.substring(2));
        return s;
    }
    public static void main(String[] a) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            String[] p = line.split("\\|");
            if (p[0].equals("R")) {
                Random r = new Random(Long.parseLong(p[1]));
                int bound = Integer.parseInt(p[2]);
                StringBuilder sb = new StringBuilder();
                for (int i = 0; i < 5; i++) sb.append(r.nextInt(bound)).append(' ');
                out.println(sb.toString().trim());
                continue;
            }
            List<Integer> tasks = new ArrayList<>();
            for (String t : p[0].split(",")) tasks.add(Integer.parseInt(t));
            PartialKeyGrouping g = new PartialKeyGrouping();
            g.prepare(null, null, tasks);
            StringBuilder sb = new StringBuilder();
            for (int i = 1; i < p.length; i++) {
                Object v = parse(p[i]);
                sb.append(g.chooseTasks(1, Arrays.asList(v, "x")).get(0)).append(' ');
            }
            out.println(sb.toString().trim());
        }
    }
}
