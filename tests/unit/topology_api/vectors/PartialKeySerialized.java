// Prints Utils.javaSerialize(new PartialKeyGrouping(new Fields(args))) in hex, as
// Storm 2.8.3 writes it: partial_key_word.hex is "word", partial_key_many.hex is
// "k0 key group ключ a b c d e f g h i j k l m" (17 fields: the HashMap resized).
import java.util.*;
import org.apache.storm.grouping.PartialKeyGrouping;
import org.apache.storm.tuple.Fields;
import org.apache.storm.utils.Utils;
public class PartialKeySerialized {
    public static void main(String[] a) throws Exception {
        byte[] b = Utils.javaSerialize(new PartialKeyGrouping(new Fields(a)));
        System.out.println(HexFormat.of().formatHex(b));
    }
}
