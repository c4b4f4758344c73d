// A Curator LeaderLatch participant for tenure's interop test.
// Usage: java Latch <connect string> <latch path> <participant id>
// Prints "LEADER" when it leads; closes the latch (deleting its node) and
// exits when a line "close" (or end of input) arrives on stdin.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.RetryNTimes;

public class Latch {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 5000, 5000, new RetryNTimes(10, 100));
        client.start();
        client.blockUntilConnected();
        LeaderLatch latch = new LeaderLatch(client, args[1], args[2]);
        latch.addListener(new LeaderLatchListener() {
            public void isLeader() { System.out.println("LEADER"); System.out.flush(); }
            public void notLeader() { System.out.println("NOT-LEADER"); System.out.flush(); }
        });
        latch.start();
        System.out.println("STARTED");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null && !line.trim().equals("close")) { }
        latch.close();
        client.close();
        System.out.println("CLOSED");
        System.out.flush();
    }
}
