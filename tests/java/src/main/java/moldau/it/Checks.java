package moldau.it;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;

/**
 * Runs named checks of a class against a broker: {@code kafka-run-class moldau.it.AdminChecks
 * BOOTSTRAP NAME...}. A check is a public static method taking the bootstrap address; it
 * throws (an AssertionError, a client's exception) when Moldau answers otherwise than Kafka
 * would. Exit status 0 when every named check passed, 1 otherwise; pytest runs one name a
 * test (tests/kafka/).
 */
public final class Checks {
    private Checks() {}

    public static void run(Class<?> owner, String[] args) {
        if (args.length < 2) {
            System.err.println("usage: " + owner.getName() + " BOOTSTRAP CHECK...");
            System.exit(2);
        }
        String bootstrap = args[0];
        int failed = 0;
        for (int i = 1; i < args.length; i++) {
            String name = args[i];
            Method check;
            try {
                check = owner.getMethod(name, String.class);
            } catch (NoSuchMethodException e) {
                System.err.println(name + ": no such check in " + owner.getName());
                failed++;
                continue;
            }
            if (!Modifier.isStatic(check.getModifiers())) {
                throw new IllegalStateException(name + " must be static");
            }
            long start = System.nanoTime();
            try {
                check.invoke(null, bootstrap);
                System.out.printf("PASS %s (%d ms)%n", name, (System.nanoTime() - start) / 1_000_000);
            } catch (InvocationTargetException e) {
                failed++;
                System.out.printf("FAIL %s: %s%n", name, e.getCause());
                e.getCause().printStackTrace();
            } catch (IllegalAccessException e) {
                throw new IllegalStateException(e);
            }
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    /** Throws with the message unless the condition holds (Java's assert is off by default). */
    public static void check(boolean condition, String message) {
        if (!condition) {
            throw new AssertionError(message);
        }
    }

    public static void equal(Object expected, Object actual, String what) {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }
}
