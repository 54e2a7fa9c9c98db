// Validates XML files against an XML Schema with the JDK's own validator:
//   java ValidateXml.java SCHEMA.xsd FILE.xml ...
// prints "valid F" or "invalid F: why" per file; exits 1 when one is invalid.
// Used by tests/brokers/artemis/test_broker_xml.py (no XSD validator in Python's stdlib).
import javax.xml.XMLConstants;
import javax.xml.transform.stream.StreamSource;
import javax.xml.validation.SchemaFactory;
import java.io.File;

public class ValidateXml {
    public static void main(String[] args) throws Exception {
        var schema = SchemaFactory.newInstance(XMLConstants.W3C_XML_SCHEMA_NS_URI).newSchema(new File(args[0]));
        int bad = 0;
        for (int i = 1; i < args.length; i++) {
            try {
                schema.newValidator().validate(new StreamSource(new File(args[i])));
                System.out.println("valid " + args[i]);
            } catch (org.xml.sax.SAXException e) {
                System.out.println("invalid " + args[i] + ": " + e.getMessage());
                bad++;
            }
        }
        System.exit(bad == 0 ? 0 : 1);
    }
}
