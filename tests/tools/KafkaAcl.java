// KafkaAcl.java — adds or removes one ACL with Kafka's own Admin client, for
// the tests of an authorizing cluster (tests/integration/kafka_cluster.py,
// KafkaCluster.acl). Run by Java's source launcher on the broker's
// classpath (tests/tools/kafka.sh):
//
//   java -cp 'LIB/*' tests/tools/KafkaAcl.java BOOTSTRAP add|remove PRINCIPAL TOPIC OPERATION PERMISSION
//
// e.g. 127.0.0.1:9092 add User:relay orders WRITE DENY. Waits until the
// broker answered; exits 1 with the broker's error, 2 on bad arguments.
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class KafkaAcl {
    public static void main(String[] args) throws Exception {
        if (args.length != 6 || !(args[1].equals("add") || args[1].equals("remove"))) {
            System.err.println("usage: KafkaAcl BOOTSTRAP add|remove PRINCIPAL TOPIC OPERATION PERMISSION");
            System.exit(2);
        }
        AclOperation op = AclOperation.fromString(args[4]);
        AclPermissionType perm = AclPermissionType.fromString(args[5]);
        if (op == AclOperation.UNKNOWN || perm == AclPermissionType.UNKNOWN) {
            System.err.println("unknown operation or permission: " + args[4] + " " + args[5]);
            System.exit(2);
        }
        AclBinding acl = new AclBinding(
            new ResourcePattern(ResourceType.TOPIC, args[3], PatternType.LITERAL),
            new AccessControlEntry(args[2], "*", op, perm));
        Properties conf = new Properties();
        conf.put("bootstrap.servers", args[0]);
        try (Admin admin = Admin.create(conf)) {
            if (args[1].equals("add"))
                admin.createAcls(List.of(acl)).all().get();
            else
                admin.deleteAcls(List.of(acl.toFilter())).all().get();
        } catch (java.util.concurrent.ExecutionException e) {
            System.err.println("KafkaAcl " + args[1] + " " + acl + ": " + e.getCause());
            System.exit(1);
        }
    }
}
