// Prints the tasks PartialKeyGrouping(new Fields(...)) picks, from Storm 2.8.3 itself:
// lines "tasks|output fields|grouping fields|row;row;..." (values space-separated;
// prefixes i: Integer, L: Long, D: Double, M: BigDecimal, B: Boolean, l: a list,
// null; else a String). Vectors in test_partial_key.py.
import java.io.*;
import java.lang.reflect.Field;
import java.math.*;
import java.util.*;
import org.apache.storm.grouping.PartialKeyGrouping;
import org.apache.storm.tuple.Fields;
public class PartialKeyFieldsVectors {
    static Object parse(String s) {
        if (s.equals("null")) return null;
        if (s.startsWith("i:")) return Integer.valueOf(s.substring(2));
        if (s.startsWith("L:")) return Long.valueOf(s.substring(2));
        if (s.startsWith("D:")) return Double.valueOf(s.substring(2));
        if (s.startsWith("M:")) return new BigDecimal(s.substring(2));
        if (s.startsWith("B:")) return Boolean.valueOf(s.substring(2));
        if (s.startsWith("l:")) { List<Object> l = new ArrayList<>(); for (String p : s.substring(2).split(",")) l.add(parse(p)); return l; }
        return s;
    }
    public static void main(String[] a) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            // tasks|outfields|groupfields|row;row;...  row = v1 v2 ...
            String[] p = line.split("\\|");
            List<Integer> tasks = new ArrayList<>();
            for (String t : p[0].split(",")) tasks.add(Integer.parseInt(t));
            PartialKeyGrouping g = new PartialKeyGrouping(new Fields(p[2].split(",")));
            Field tt = PartialKeyGrouping.class.getDeclaredField("targetTasks");
            tt.setAccessible(true);
            tt.set(g, tasks);
            Field f = PartialKeyGrouping.class.getDeclaredField("outFields");
            f.setAccessible(true);
            f.set(g, new Fields(p[1].split(",")));
            StringBuilder sb = new StringBuilder();
            for (String row : p[3].split(";")) {
                List<Object> vals = new ArrayList<>();
                for (String v : row.split(" ")) vals.add(parse(v));
                sb.append(g.chooseTasks(1, vals).get(0)).append(' ');
            }
            out.println(sb.toString().trim());
        }
    }
}
